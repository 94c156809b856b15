"""Cold start: fresh interpreters that import a package or run a command, from start to exit.

Every command runs in its own new process, interleaved with ``python -c "import torch"`` (the raw baseline)
round by round. ``os.wait4`` gives each child's own CPU time and peak RSS. The time rows use the CPU time
(user + system) of the whole process: an import is single-threaded work, and on a shared machine CPU time
measures that work while wall time also measures the neighbours (the JSON keeps the wall times too).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _harness import AA, ACCELERATE, CORE, LIGHTNING, RAW, Goal, RowResult, Spread, interleave, row_result

__all__ = ["collect"]

_TIME_NOTE = "CPU time (user + system) of a new interpreter from start to exit."


def _script(name: str) -> str | None:
    """The console script ``name`` of this interpreter's environment (what a user of this venv runs)."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return shutil.which(name)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _run(argv: list[str]) -> tuple[float, float, float]:
    """Run ``argv`` to completion; return (CPU seconds, wall seconds, peak RSS in MiB) of that process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {process.returncode}: {err.decode(errors='replace')[-2000:]}")
    return usage.ru_utime + usage.ru_stime, elapsed, usage.ru_maxrss / 1024.0  # ru_maxrss: KiB on Linux


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _byte_compile_fabric_core() -> list[str]:
    """Byte-compile fabric-core and its plugins' packages, as pip does for every package it installs.

    torch, Lightning and Accelerate come with bytecode from their install. An editable install of
    fabric-core has none where ``PYTHONDONTWRITEBYTECODE`` is set (as on these machines), and every cold
    start would then compile some 40 modules from source, about 20 ms that no installed user pays.

    Returns:
        The package names compiled.
    """
    import compileall
    from importlib import metadata

    from fabric_core._kernel.manager import ENTRY_POINT_GROUP  # no torch: the package's own modules only

    names = {"fabric_core"} | {ep.module.partition(".")[0] for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    compiled = []
    for name in sorted(names):
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        for location in locations:
            compileall.compile_dir(location, quiet=1)
        if locations:
            compiled.append(name)
    return compiled


def _commands() -> tuple[dict[str, list[str]], dict[str, str]]:
    """``{"<row>:<variant>": argv}`` for every command the installed packages allow, and notes."""
    commands: dict[str, list[str]] = {
        f"torch:{RAW}": _python("import torch"),
        f"torch:{AA}": _python("import torch"),
        f"import:{CORE}": _python("import fabric_core"),
        f"ready:{CORE}": _python("from fabric_core import Fabric"),
    }
    notes: dict[str, str] = {}
    cli = _script("fabric-core")
    if cli is None:
        notes["cli"] = "the `fabric-core` console script is not installed (`pip install -e .`)."
    else:
        commands[f"cli:{CORE}"] = [cli, "list-plugins"]
    if _installed("lightning_fabric"):
        commands[f"ready:{LIGHTNING}"] = _python("from lightning_fabric import Fabric")
        lf_cli = _script("fabric")
        if lf_cli is not None:
            commands[f"cli:{LIGHTNING}"] = [lf_cli, "--help"]
    if _installed("accelerate"):
        commands[f"ready:{ACCELERATE}"] = _python("from accelerate import Accelerator")
        acc_cli = _script("accelerate")
        if acc_cli is not None:
            commands[f"cli:{ACCELERATE}"] = [acc_cli, "--help"]
    return commands, notes


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure the cold-start rows.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        The rows ``import_core``, ``import_ready``, ``cli_cold`` and ``rss_import`` (those selected).
    """
    wanted = {"import_core", "import_ready", "cli_cold", "rss_import"} if rows is None else rows
    compiled = _byte_compile_fabric_core()
    compiled_note = f" fabric-core's packages ({', '.join(compiled)}) were byte-compiled first, as an install does."
    commands, notes = _commands()
    prefix_for_row = {"import_core": "import", "import_ready": "ready", "cli_cold": "cli", "rss_import": "ready"}
    prefixes = {"torch"} | {prefix_for_row[r] for r in wanted if r in prefix_for_row}
    if "import_core" in wanted:
        prefixes.add("ready")
    commands = {k: v for k, v in commands.items() if k.split(":", 1)[0] in prefixes}
    if len(prefixes) == 1:
        return []
    rss: dict[str, list[float]] = {name: [] for name in commands}
    wall: dict[str, list[float]] = {name: [] for name in commands}

    def measure(name: str) -> float:
        cpu, elapsed, peak = _run(commands[name])
        rss[name].append(peak)
        wall[name].append(elapsed)
        return cpu

    measures = {name: (lambda n=name: measure(n)) for name in commands}
    values = interleave(measures, rounds=3 if quick else 12, seed=1, warmup=0 if quick else 1)
    # interleave() measured the warm-up round too; the RSS lists keep only the rounds that count.
    rss = {name: samples[-len(values[name]) :] for name, samples in rss.items()}
    wall = {name: samples[-len(values[name]) :] for name, samples in wall.items()}

    def variants(prefix: str, series: dict[str, list[float]]) -> dict[str, list[float]]:
        picked = {RAW: series[f"torch:{RAW}"], AA: series[f"torch:{AA}"]}
        for name, samples in series.items():
            row, _, variant = name.partition(":")
            # Lightning and Accelerate import torch either way: their "ready" runs serve the import row too.
            if row == prefix or (prefix == "import" and row == "ready" and variant != CORE):
                picked[variant] = samples
        return picked

    labels_raw = {RAW: 'python -c "import torch"', AA: 'python -c "import torch"'}

    def labels(prefix: str) -> dict[str, str]:
        out = dict(labels_raw)
        for name, argv in commands.items():
            row, _, variant = name.partition(":")
            if row == prefix or (prefix == "import" and row == "ready" and variant != CORE):
                shown = [Path(argv[0]).name, *argv[1:]]
                if argv[0] == sys.executable:
                    shown = ["python", argv[1], f'"{argv[2]}"']
                out[variant] = " ".join(shown)
        return out

    results: list[RowResult] = []

    def with_wall(row: RowResult, prefix: str) -> RowResult:
        walls = variants(prefix, wall)
        row.extra["wall_seconds"] = {k: Spread.of(v).as_dict() for k, v in walls.items()}
        row.extra["wall_ratio"] = {
            k: Spread.of([s / r for r, s in zip(walls[RAW], v)]).as_dict() for k, v in walls.items() if k != RAW
        }
        return row

    if "import_core" in wanted:
        results.append(
            with_wall(
                row_result(
                    "import_core",
                    "cold import `import fabric_core` (no torch), x `import torch`",
                    variants("import", values),
                    goal=Goal("<=", 0.1),
                    labels=labels("import"),
                    note=_TIME_NOTE + compiled_note,
                ),
                "import",
            )
        )
    if "import_ready" in wanted:
        results.append(
            with_wall(
                row_result(
                    "import_ready",
                    "cold import ready to build `Fabric`, x `import torch`",
                    variants("ready", values),
                    goal=Goal("<=", 1.05),
                    labels=labels("ready"),
                    note=_TIME_NOTE + compiled_note,
                ),
                "ready",
            )
        )
    if "cli_cold" in wanted:
        results.append(
            with_wall(
                row_result(
                    "cli_cold",
                    "`fabric-core list-plugins` cold start, x `import torch`",
                    variants("cli", values),
                    goal=Goal("<=", 0.15),
                    labels=labels("cli"),
                    note=notes.get("cli", "Lightning and Accelerate run their own CLI's `--help`.") + compiled_note,
                ),
                "cli",
            )
        )
    if "rss_import" in wanted:
        results.append(
            row_result(
                "rss_import",
                "peak RSS after the import ready to build, x `import torch`",
                variants("ready", rss),
                metric="memory",
                unit="MiB",
                goal=Goal("<=", 1.02),
                labels=labels("ready"),
                note="Peak resident memory of the whole process (`ru_maxrss` from `wait4`).",
            )
        )
    return results
