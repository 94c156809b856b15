"""The results as a terminal table, a JSON file, a Markdown page and a matplotlib plot."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from _harness import AA, ACCELERATE, CORE, LIGHTNING, RowResult

HERE = Path(__file__).resolve().parent

__all__ = ["environment", "gpu_section", "markdown", "plot", "terminal_table", "write_json"]

_COLUMNS = ((CORE, "fabric-core"), (AA, "A/A (noise)"), (LIGHTNING, "Lightning Fabric"), (ACCELERATE, "Accelerate"))


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def environment(quick: bool, threads: int, seconds: float, argv: Sequence[str]) -> dict[str, Any]:
    """What the numbers were measured on and with."""
    packages = ("fabric-core", "torch", "lightning-fabric", "accelerate", "deepspeed")
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if quick else "full",
        "command": " ".join(["python", "bench/run.py", *argv]),
        "seconds": round(seconds, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch_threads": threads,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "packages": {name: _version(name) for name in packages},
        "executable": sys.executable,
    }


def write_json(path: Path, env: dict[str, Any], rows: Sequence[RowResult]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"environment": env, "rows": [row.as_dict() for row in rows]}
    path.write_text(json.dumps(payload, indent=1) + "\n")


def _verdict(row: RowResult) -> str:
    if row.passed is None:
        return "-"
    return "yes" if row.passed else "**no**"


def _cells(row: RowResult) -> list[str]:
    cells = [row.title, str(row.goal) if row.goal else "-"]
    for variant, _ in _COLUMNS:
        spread = row.ratios.get(variant)
        cells.append(spread.fmt() if spread is not None else "n/a")
    cells.insert(3, _verdict(row))
    return cells


def terminal_table(rows: Sequence[RowResult]) -> str:
    header = ["row", "goal", "fabric-core", "met", "A/A", "lightning", "accelerate"]
    table = [header] + [[c.replace("**", "").replace("`", "") for c in _cells(r)] for r in rows]
    table = [[r[0][:60], *r[1:]] for r in table]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _absolute(row: RowResult, variant: str) -> str:
    spread = row.absolute.get(variant)
    if spread is None:
        return "n/a"
    value = spread.median
    if row.unit == "MiB":
        return f"{value:.0f} MiB"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} µs"


def markdown(env: dict[str, Any], rows: Sequence[RowResult], plot_name: str | None) -> str:
    """The page ``docs/benchmarks.md``."""
    packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items() if v)
    load = env.get("load_average")
    lines = [
        "# Benchmarks",
        "",
        "Every row is a ratio to raw PyTorch doing the same work **in the same run**: each round measures every",
        "variant once and divides it by the raw value of that round; across rounds the orders follow a balanced",
        "design, so each variant runs in each position, and after each other, equally often. The table shows",
        "the median of those per-round ratios with `[min, max]`. The **A/A** column measures raw PyTorch",
        "against itself the same way: it is the noise floor, and a ratio within its spread of 1.0 is no",
        "measurable difference. For time and memory rows lower is better; for steps/s rows (a ratio of",
        "steps per second) higher is better.",
        "",
        f"Regenerate with `python bench/run.py` (about 9 minutes on 2 cores; `--quick` under 3). Run: {env['mode']},",
        f"{env['date']}, {env['seconds']:.0f} s; Python {env['python']} on {env['platform']}, {env['cpus']} CPUs,",
        f"torch threads {env['torch_threads']}; {packages}."
        + (f" Load average at the end: {', '.join(f'{x:.1f}' for x in load)}." if load else ""),
        "",
        "| row | goal | fabric-core | met | A/A (noise) | Lightning Fabric | Accelerate | raw PyTorch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = _cells(row)
        cells.append(_absolute(row, "raw"))
        lines.append("| " + " | ".join(cells) + " |")
    if plot_name:
        lines += ["", f"![ratios to raw PyTorch, median with min and max]({plot_name})"]
    lines += gpu_section(HERE / "gpu_results.json")
    lines += [
        "",
        "## Where fabric-core's time goes",
        "",
        "- **Training steps.** Per step, fabric-core adds the calls the Fabric API consists of: the module",
        "  wrapper, `fabric.backward` and the optimizer wrapper. Each decides at `setup` what its step must do.",
        "  While neither the wrapper nor the strategy's module has hooks, the module wrapper skips both",
        "  `Module.__call__`s and calls the module's `forward`, which is what `Module.__call__` does for a module",
        "  without hooks; it runs the stock mixed precisions' casts inline, under an autocast whose arguments",
        "  were checked once at `setup`. A small model's step is tens of microseconds, so each of these Python",
        "  calls shows as about a percent. Mixed precision also casts inputs to the autocast dtype and",
        "  outputs back to float32, as the API defines; the bf16 rows' notes give raw PyTorch's own ratio with",
        "  those two casts, their cost in a hand-written loop.",
        "- **Checkpoint save.** `fabric.save` is atomic *and* durable: a temp file, fsync, rename, so a crash or",
        "  a power loss leaves the previous checkpoint or the complete new one. It pays for the fsync by leaving",
        "  out the zip CRC32s, which `torch.load` never checks (`TorchCheckpointIO(zip_crc32=True)` writes",
        "  them), and by deleting a replaced file of 64 MiB or more on a background thread: freeing a large file's",
        "  blocks takes the filesystem most of a second, which raw `torch.save` spends truncating the old file.",
        "- **Checkpoint load.** `fabric.load` maps the file when the state holds a module: the module copies",
        "  its tensors straight from the file's pages instead of `torch.load` reading them into memory first.",
        "  The optimizer's state is copied out of the file tensor by tensor, into the tensors of the state it",
        "  replaces where nothing else holds them, and the file's pages each copy read are handed back at once",
        "  (`madvise`); plain values and the returned remainder get their own copies. Nothing holds the mapping",
        "  afterwards, and the load adds about the memory of a raw `torch.load(mmap=True)` (`load_rss_*` rows).",
        "  Every variant still reads the whole file.",
        "- **FSDP.** The root unit keeps its gathered parameters from forward to backward, as FSDP2 does by",
        "  default: backward needs them first.",
        "- **Start-up.** A fresh process pays for fabric-core's own modules (about 30 ms of CPU here) and, at",
        "  the first `Fabric(...)`, for discovering plugins (about 28 ms with the eleven first-party plugins",
        "  installed): one scan of the entry points, one read of each plugin's metadata, its registration module,",
        "  and a check of its `fabric-core` requirement with `packaging.specifiers` alone. Nothing beyond the chosen",
        "  components is imported: the single-file checkpoint path never imports `torch.distributed.checkpoint`,",
        "  selection hooks answer from names, and `setup` asks whether a model is compiled only once `torch._dynamo`",
        "  is imported. `fabric-core run` resolves the options as `Fabric(...)` would before any worker starts and,",
        "  with no `--main-port`, lets torch's c10d rendezvous bind a free port (`torchrun --master-port` uses the",
        "  static one); each worker then starts as a single process does.",
        "",
        "## What each row runs",
        "",
    ]
    for row in rows:
        detail = f"- **{row.key}** ({row.rounds} rounds): {row.note}".rstrip()
        shown = {k: v for k, v in row.labels.items() if k != AA}
        if shown:
            detail += " " + "; ".join(f"{k}: `{v}`" for k, v in shown.items()) + "."
        lines.append(detail)
    lines += [
        "",
        "Lightning Fabric and Accelerate are measured when they are installed (`pip install -r",
        "bench/requirements.txt`); `--rows NAME ...` measures a subset, `--json PATH` moves the JSON file.",
        "",
    ]
    return "\n".join(lines)


def gpu_section(path: Path) -> list[str]:
    """The page's GPU section, from the last run of ``scripts/gpu_all.sh`` kept in ``bench/gpu_results.json``.

    ``run.py`` runs on the CPU; the GPU numbers come from a separate machine and stay until that file is
    replaced by a newer run (nothing here measures them).
    """
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    bench, header = data["bench"], data["bench"]["header"]
    frameworks = [name for name in ("raw", "fabric-core", "lightning") if name in bench["results"][0]["steps_per_s"]]
    cfg = header["config"]
    lines = [
        "",
        "## On a GPU",
        "",
        f"`{data['command']}`, {data['date']}: {data['machine']}. The machine has no network, so it runs its own",
        "CUDA build of torch rather than the pinned 2.13.0. Each check's PASS/FAIL, as the script printed it:",
        "",
        "| check | result | seconds | detail |",
        "|---|---|---|---|",
    ]
    for c in data["checks"]:
        detail = c["detail"].replace("|", "\\|")  # a table cell: the detail's own bars would split it
        lines.append(f"| {c['check']} | {c['result']} | {c['seconds']} | {detail} |")
    lines += [
        "",
        "One GPU leaves untested: NCCL between two processes (ddp's gradient all-reduce, FSDP's sharding across",
        "ranks), and every test marked `needs 2 CUDA GPUs`.",
        "",
        f"`bench/gpu_transformer.py`: a decoder-only transformer of {header['params'] / 1e6:.0f}M parameters"
        f" ({cfg['layers']} layers, width {cfg['dim']}, {cfg['heads']} heads, vocabulary {cfg['vocab']}), batch"
        f" {header['batch']} x {cfg['seq']} tokens, AdamW. Each framework trains its own copy in the same process,",
        f"{header['rounds']} rounds of {header['steps_per_round']} synchronized steps in a rotating order; the ratio",
        "is the median of the per-round ratios to raw PyTorch. MFU (callback) is what fabric-core's `throughput`",
        "callback reports (`throughput/device/mfu`, the peak from its table: dense bf16); MFU (by hand) is the",
        "step's FLOPs by formula (6 x tokens x matmul parameters + attention, equal to `measure_flops`:"
        f" {header['flops_per_step_formula'] / 1e12:.2f} TFLOP) over the synchronized step time and the datasheet's",
        f"{bench['results'][0]['peak_flops'] / 1e12:.1f} TFLOP/s.",
        "",
        "| precision | torch.compile | "
        + " | ".join(f"{name} steps/s" for name in frameworks)
        + " | "
        + " | ".join(f"{name} / raw" for name in frameworks if name != "raw")
        + " | MFU (callback) | MFU (by hand) |",
        "|---|---|" + "---|" * (2 * len(frameworks) - 1) + "---|---|",
    ]
    for r in bench["results"]:
        if r.get("skipped"):
            lines.append(f"| {r['precision']} | {'yes' if r['compiled'] else 'no'} | skipped: {r['skipped']} |")
            continue
        mfu = (r.get("callback") or {}).get("throughput/device/mfu")
        cells = [r["precision"], "yes" if r["compiled"] else "no"]
        cells += [f"{r['steps_per_s'][name]:.2f}" for name in frameworks]
        cells += [f"{r['ratio_to_raw'][name]:.3f}" for name in frameworks if name != "raw"]
        cells += [
            f"{100 * mfu:.1f}%" if mfu else "n/a",
            f"{100 * r['mfu_by_hand']:.1f}%" if r["mfu_by_hand"] else "n/a",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    save = bench.get("save")
    if save and "error" not in save:
        lines += [
            "",
            f"Saving that model with its AdamW state ({save['bytes'] / 1e9:.2f} GB), the time the loop is blocked"
            f" (median of 3): raw `torch.save` of the state dicts {save['torch.save']:.2f} s, `fabric.save`"
            f" {save['fabric.save']:.2f} s (atomic and fsynced), `fabric.save` with `AsyncCheckpointIO`"
            f" {save['fabric.save async']:.3f} s (until the host snapshot is taken; the write continues in the"
            " background).",
        ]
    if data.get("more"):
        lines += ["", "More runs on the same machine:", ""] + [f"- {line}" for line in data["more"]]
    return lines


def plot(path: Path, rows: Sequence[RowResult]) -> bool:
    """Draw every row's ratios (median, min-max bars, goal marks) on a log axis; ``False`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    shown = [row for row in rows if row.ratios]
    if not shown:
        return False
    styles = {
        CORE: ("tab:blue", "o"),
        AA: ("tab:gray", "s"),
        LIGHTNING: ("tab:purple", "^"),
        ACCELERATE: ("tab:orange", "D"),
    }
    offsets = {CORE: -0.27, AA: -0.09, LIGHTNING: 0.09, ACCELERATE: 0.27}
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(shown) + 1.6))
    for variant, label in _COLUMNS:
        ys, med, lo, hi = [], [], [], []
        for index, row in enumerate(shown):
            spread = row.ratios.get(variant)
            if spread is None:
                continue
            ys.append(index + offsets[variant])
            med.append(spread.median)
            lo.append(spread.median - spread.min)
            hi.append(spread.max - spread.median)
        if ys:
            color, marker = styles[variant]
            ax.errorbar(med, ys, xerr=[lo, hi], fmt=marker, color=color, label=label, capsize=2, markersize=5)
    for index, row in enumerate(shown):
        if row.goal is not None:
            ax.plot([row.goal.value] * 2, [index - 0.4, index + 0.4], color="tab:green", linewidth=2)
            ax.annotate(row.goal.op, (row.goal.value, index - 0.42), color="tab:green", fontsize=7, ha="center")
    ax.axvline(1.0, color="black", linewidth=0.6, linestyle="--")
    ax.set_xscale("log")
    ax.set_yticks(range(len(shown)), [row.key for row in shown])
    ax.invert_yaxis()
    ax.set_xlabel("ratio to raw PyTorch in the same run (log scale; green: fabric-core's goal)")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
