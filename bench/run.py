"""Run the benchmark suite: ``python bench/run.py`` (about 9 minutes on 2 cores) or ``--quick`` (under 3).

Every row is a ratio to raw PyTorch measured in the same run (see ``_harness.py``). Results go to a JSON
file and, for full runs, to ``docs/benchmarks.md`` with a plot ``docs/benchmarks.png``.

``bench_fsdp.py`` and ``bench_deepspeed.py`` beside this file, where they exist, are run too, each in its own
process; ``README.md`` here describes what they must provide.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:  # when imported rather than run as a script
    sys.path.insert(0, str(HERE))

from _harness import RowResult  # noqa: E402 - needs the path above

#: Row groups measured here, in report order: ``{group: (module, row keys)}``.
GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "import": ("rows_import", ("import_core", "import_ready", "cli_cold", "rss_import")),
    "startup": ("rows_startup", ("first_step", "construct_cold", "ddp_first_step")),
    "steps": (
        "rows_steps",
        ("construct_warm", "steps_tiny_fp32", "steps_tiny_bf16", "steps_mlp_fp32", "steps_mlp_bf16"),
    ),
    "ddp": (
        "rows_ddp",
        (
            "ddp_steps",
            "all_reduce_1",
            "all_gather_dict3",
            "flight_recorder",
            "flight_recorder_call",
            "collective_check",
        ),
    ),
    "checkpoint": ("rows_checkpoint", ("ckpt_save", "ckpt_save_nosync", "ckpt_load")),
    "load_memory": (
        "rows_load_memory",
        ("load_rss_150MB", "load_time_150MB", "load_rss_600MB", "load_time_600MB", "load_rss_1.2GB", "load_time_1.2GB"),
    ),
    "observe": ("rows_observe", ("steps_mlp_watched",)),
    "recovery": ("rows_recovery", ("recovery",)),
    "async": ("rows_async", ("ckpt_async_blocked",)),
    "data": ("rows_data", ("steps_data_position",)),
}
#: Benchmarks that plugin authors keep beside this file (``bench_<name>.py``), run when present.
EXTERNAL: tuple[str, ...] = ("fsdp", "deepspeed")
EXTERNAL_TIMEOUT = {True: 150, False: 900}


def _select(names: Sequence[str] | None) -> tuple[dict[str, set[str]], list[str]]:
    """Map ``--rows`` (row keys and group names) to ``{group: row keys}`` and the external benches to run."""
    if not names:
        return {group: set(keys) for group, (_, keys) in GROUPS.items()}, list(EXTERNAL)
    chosen: dict[str, set[str]] = {}
    external: list[str] = []
    known = {key for _, keys in GROUPS.values() for key in keys}
    for name in names:
        if name in GROUPS:
            chosen.setdefault(name, set()).update(GROUPS[name][1])
        elif name in EXTERNAL:
            external.append(name)
        elif name in known:
            group = next(g for g, (_, keys) in GROUPS.items() if name in keys)
            chosen.setdefault(group, set()).add(name)
        else:
            valid = ", ".join([*GROUPS, *EXTERNAL, *sorted(known)])
            raise SystemExit(f"bench/run.py: --rows {name!r} is not a row or group. Valid choices: {valid}.")
    return chosen, external


def _rows_from_payload(payload: Any) -> list[RowResult]:
    items = payload.get("rows", []) if isinstance(payload, dict) else payload
    return [item if isinstance(item, RowResult) else RowResult.from_dict(item) for item in items]


def _external_rows(name: str, quick: bool) -> list[RowResult]:
    """Run ``bench_<name>.py`` in its own process and read its rows; a failure becomes a note row."""
    script = HERE / f"bench_{name}.py"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        # A `collect()` speaks this harness's rows; anything else is a script that writes the JSON itself.
        if "def collect(" in script.read_text():
            argv = [sys.executable, str(HERE / "run.py"), "--external", name, "--json", str(out)]
        else:
            argv = [sys.executable, str(script), "--json", str(out)]
        if quick:
            argv.append("--quick")
        try:
            done = subprocess.run(
                argv, cwd=ROOT, capture_output=True, text=True, timeout=EXTERNAL_TIMEOUT[quick], check=False
            )
            problem = None if done.returncode == 0 else f"exited {done.returncode}: {done.stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            problem = f"took longer than {EXTERNAL_TIMEOUT[quick]} s"
        if problem is None and out.exists():
            try:
                return _rows_from_payload(json.loads(out.read_text()))
            except (ValueError, KeyError, TypeError) as exc:
                problem = f"wrote JSON this runner cannot read ({exc})"
        problem = problem or "wrote no JSON"
    return [
        RowResult(
            key=name,
            title=f"{name} vs raw (bench_{name}.py)",
            metric="time",
            unit="s",
            goal=None,
            ratios={},
            absolute={},
            note=f"not measured: bench/bench_{name}.py {problem}",
        )
    ]


def _run_external_in_process(name: str, quick: bool, json_path: Path) -> int:
    module = importlib.import_module(f"bench_{name}")
    rows = module.collect(quick, None)
    payload = {"rows": [row.as_dict() if isinstance(row, RowResult) else row for row in rows]}
    json_path.write_text(json.dumps(payload, indent=1))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/run.py",
        description="Measure fabric-core (and Lightning Fabric / Accelerate when installed) against raw PyTorch.",
    )
    parser.add_argument("--quick", action="store_true", help="Fewer rounds (under 3 minutes); docs only with --docs.")
    parser.add_argument("--rows", nargs="+", metavar="NAME", help="Row keys or groups: import steps ddp checkpoint ...")
    parser.add_argument("--json", type=Path, default=HERE / "results.json", help="Where to write the JSON results.")
    parser.add_argument("--no-docs", action="store_true", help="Do not write docs/benchmarks.md and the plot.")
    parser.add_argument("--docs", action="store_true", help="Write the docs even for --quick or --rows runs.")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: less noise).")
    parser.add_argument("--external", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    if args.external:
        return _run_external_in_process(args.external, args.quick, args.json)
    chosen, external = _select(args.rows)
    started = time.perf_counter()
    rows: list[RowResult] = []
    for group, (module_name, _) in GROUPS.items():
        if group not in chosen:
            continue
        print(f"== {group}", flush=True)
        group_start = time.perf_counter()
        module = importlib.import_module(module_name)
        new_rows = module.collect(args.quick, chosen[group])
        rows.extend(new_rows)
        from report import terminal_table

        print(terminal_table(new_rows), flush=True)
        print(f"   ({time.perf_counter() - group_start:.0f} s)", flush=True)
    for name in external:
        if (HERE / f"bench_{name}.py").exists():
            print(f"== {name} (bench_{name}.py)", flush=True)
            rows.extend(_external_rows(name, args.quick))
    from report import environment, markdown, plot, terminal_table, write_json

    env = environment(args.quick, args.threads, time.perf_counter() - started, argv)
    write_json(args.json, env, rows)
    print("\n" + terminal_table(rows))
    print(f"\n{env['seconds']:.0f} s; JSON: {args.json}")
    full = not args.quick and not args.rows
    if not args.no_docs and (full or args.docs):
        docs = ROOT / "docs"
        has_plot = plot(docs / "benchmarks.png", rows)
        (docs / "benchmarks.md").write_text(markdown(env, rows, "benchmarks.png" if has_plot else None))
        print(f"docs: {docs / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
