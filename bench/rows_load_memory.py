"""Peak memory and time of loading a full checkpoint into a live model and its Adam optimizer.

For each size, one checkpoint is written by fabric-core's ``fabric.save(path, {"model": ..., "optimizer": ...})``
(single-device CPU Fabric, after one optimizer step, so that Adam's state exists). Each measurement is a fresh
process that builds the model and optimizer (one step: the live state a resumed run replaces), then loads the
checkpoint into them one way, timed around the load call only. The peak RSS the load adds is the process's
high-water mark after the load (``VmHWM``, reset just before it through ``/proc/self/clear_refs``) minus its
RSS just before.

Variants, per size:

- ``raw``: ``torch.load(path, mmap=True)`` + ``load_state_dict`` on the model and the optimizer: the baseline
  the goals are stated against (peak RSS at most 1.1 x, time at most 2 x). The optimizer keeps tensors that
  map the file (nothing copies them), which is why this is the least memory a load can add.
- ``raw, read``: ``torch.load(path)`` + ``load_state_dict`` x2 (every tensor read into memory first).
- ``lightning``: Lightning Fabric's ``fabric.load(path, {"model": ..., "optimizer": ...})``.
- ``fabric-core``: ``fabric.load(path, {"model": ..., "optimizer": ...})``; nothing it restores keeps the
  file mapped afterwards.

The page cache holds the checkpoint for every variant (it was just written): what is compared is memory and
CPU work, not the disk. ``python bench/rows_load_memory.py [--quick]`` prints the absolute figures per size.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from _harness import AA, CORE, LIGHTNING, RAW, Goal, RowResult, interleave, row_result

__all__ = ["collect"]

#: The variant whose tensors are all read into memory before they are loaded.
RAW_READ: Final = "raw, read"
#: ``{tag: (layers, width)}``: ``Linear(width, width)`` layers; "1.2GB" is 6 x Linear(4096) + Adam (1.21 GB).
SIZES: Final = {"150MB": (3, 2048), "600MB": (3, 4096), "1.2GB": (6, 4096)}
ROWS: Final = tuple(f"load_{what}_{tag}" for tag in SIZES for what in ("rss", "time"))
_MIB: Final = 2**20

_CHILD: Final = r"""
import json, os, resource, sys, time
import torch
from torch import nn

case, path, layers, width = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(1)
model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model(torch.randn(2, width)).sum().backward()
optimizer.step()
optimizer.zero_grad(set_to_none=True)
if case == "lightning":
    from lightning_fabric import Fabric
elif case == "fabric-core":
    from fabric_core import Fabric
if case in ("lightning", "fabric-core"):
    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer = fabric.setup(model, optimizer)
    load = lambda: fabric.load(path, {"model": model, "optimizer": optimizer})
else:
    def load():
        checkpoint = torch.load(path, mmap=case == "raw")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])

def status(field):
    with open("/proc/self/status") as file:
        return next(int(line.split()[1]) * 1024 for line in file if line.startswith(field + ":"))

import gc
gc.collect()
with open("/proc/self/clear_refs", "w") as file:
    file.write("5")  # resets VmHWM to the current RSS
before = status("VmRSS")
start = time.perf_counter()
load()
seconds = time.perf_counter() - start
peak = status("VmHWM")
print(json.dumps({"rss_added": peak - before, "seconds": seconds}))
"""

_SAVE: Final = r"""
import sys
import torch
from torch import nn
from fabric_core import Fabric

path, layers, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
fabric = Fabric(accelerator="cpu", devices=1)
model, optimizer = fabric.setup(model, optimizer)
model(torch.randn(2, width)).sum().backward()
optimizer.step()
fabric.save(path, {"model": model, "optimizer": optimizer})
"""


def _python(code: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench child {args[:1]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def _variants() -> list[str]:
    names = [RAW, RAW_READ, CORE]
    if importlib.util.find_spec("lightning_fabric") is not None:
        names.append(LIGHTNING)
    return names


def measure_case(case: str, path: Path, layers: int, width: int) -> dict[str, float]:
    """One fresh process loading ``path`` the ``case`` way: ``{"rss_added": bytes, "seconds": s}``."""
    child_case = "raw" if case == AA else "raw-read" if case == RAW_READ else case
    result: dict[str, float] = json.loads(_python(_CHILD, child_case, str(path), str(layers), str(width)))
    return result


def _recorded(case: str, path: Path, layers: int, width: int, into: list[dict[str, float]]) -> Callable[[], float]:
    def run() -> float:
        sample = measure_case(case, path, layers, width)
        into.append(sample)
        return sample["seconds"]

    return run


_LABELS: Final = {
    RAW: "torch.load(path, mmap=True) + load_state_dict x2",
    AA: "the same as raw, measured again",
    RAW_READ: "torch.load(path) + load_state_dict x2",
    LIGHTNING: "Lightning fabric.load(path, {model, optimizer})",
    CORE: "fabric.load(path, {model, optimizer}) (nothing kept mapped)",
}


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Peak RSS added and seconds of a full load, per size (rows ``load_rss_<size>``, ``load_time_<size>``).

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).
    """
    wanted = [r for r in ROWS if rows is None or r in rows]
    results: list[RowResult] = []
    rounds = 2 if quick else 5
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_CHECKPOINT_DIR")) as tmp:
        for tag, (layers, width) in SIZES.items():
            keys = [key for key in (f"load_rss_{tag}", f"load_time_{tag}") if key in wanted]
            if not keys:
                continue
            path = Path(tmp) / f"{tag}.ckpt"
            _python(_SAVE, str(path), str(layers), str(width))
            size = path.stat().st_size
            samples: dict[str, list[dict[str, float]]] = {name: [] for name in [*_variants(), AA]}
            # One process per variant and round gives both figures (interleave keeps the seconds).
            measures = {name: _recorded(name, path, layers, width, samples[name]) for name in samples}
            interleave(measures, rounds=rounds, seed=11, warmup=0)
            title = f"full load into a live model + Adam, {layers} x Linear({width}), {size / 1e9:.2f} GB file"
            note = (
                "Fresh process per load; the checkpoint in the page cache. Baseline raw is the mapped torch.load"
                " (its optimizer keeps tensors that map the file)."
            )
            figures = {
                "rss": ({n: [s["rss_added"] / _MIB for s in v] for n, v in samples.items()}, "memory", "MiB", 1.1),
                "time": ({n: [s["seconds"] for s in v] for n, v in samples.items()}, "time", "s", 2.0),
            }
            for what, (values, metric, unit, goal) in figures.items():
                key = f"load_{what}_{tag}"
                if key in keys:
                    results.append(
                        row_result(
                            key,
                            f"{title}, {'peak RSS added' if what == 'rss' else 'time'}",
                            values,
                            metric=metric,  # type: ignore[arg-type]
                            unit=unit,
                            goal=Goal("<=", goal),
                            labels=dict(_LABELS),
                            note=note,
                        )
                    )
            path.unlink()
    return results


def _table(rows: list[RowResult]) -> str:
    names = [RAW_READ, RAW, LIGHTNING, CORE]
    lines = [f"{'row':<18}" + "".join(f"{name:>22}" for name in names) + f"{'core / raw':>12}"]
    for row in rows:
        cells = []
        for name in names:
            spread = row.absolute.get(name)
            cells.append(f"{'-' if spread is None else spread.fmt(2 if row.unit == 's' else 0):>22}")
        ratio = row.core_ratio
        lines.append(f"{row.key:<18}" + "".join(cells) + f"{'-' if ratio is None else ratio.fmt():>12}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", nargs="+")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = collect(args.quick, set(args.rows) if args.rows else None)
    print(_table(rows))
    if args.json:
        args.json.write_text(json.dumps({"rows": [row.as_dict() for row in rows]}, indent=1))


if __name__ == "__main__":
    main()
