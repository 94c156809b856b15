"""Start-up: a fresh process from its start to the first optimizer step, and its first construction.

Every variant runs the same small loop (an MLP, one forward, backward and optimizer step on the CPU) in a new
interpreter, interleaved with raw PyTorch round by round; the process exits right after its first step.

- ``first_step``: the CPU time (user + system) of the whole process, as in ``rows_import`` (the JSON keeps
  the wall times too). Everything the library adds to a start is in it: imports, construction, setup.
- ``construct_cold``: the first ``Fabric(accelerator="cpu", devices=1)`` (``Accelerator(cpu=True)``) of the
  process, timed inside it after the import, against the raw process's whole start to first step.
- ``ddp_first_step``: a 2-process ddp job from its launcher's start to the first step of both workers, against
  ``torchrun`` (measured in :mod:`rows_startup_ddp`).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time

import rows_startup_ddp
from _harness import AA, ACCELERATE, CORE, LIGHTNING, RAW, Goal, Measure, RowResult, Spread, interleave, row_result
from rows_import import _byte_compile_fabric_core, _installed

__all__ = ["collect"]

ROWS = ("first_step", "construct_cold", *rows_startup_ddp.ROWS)
_TIMEOUT = 300

_MODEL = (
    "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "x = torch.randn(16, 32)\n"
)
#: The loop per variant; ``T`` is the construction's duration, printed for ``construct_cold``.
_SCRIPTS = {
    RAW: "import torch\n" + _MODEL + "model(x).sum().backward()\noptimizer.step()\n",
    CORE: (
        "import time, torch\nfrom fabric_core import Fabric\n"
        "t = time.perf_counter(); fabric = Fabric(accelerator='cpu', devices=1); T = time.perf_counter() - t\n"
        + _MODEL
        + "model, optimizer = fabric.setup(model, optimizer)\nfabric.backward(model(x).sum())\noptimizer.step()\n"
        "print(T)\n"
    ),
    LIGHTNING: (
        "import time, torch\nfrom lightning_fabric import Fabric\n"
        "t = time.perf_counter(); fabric = Fabric(accelerator='cpu', devices=1); T = time.perf_counter() - t\n"
        + _MODEL
        + "model, optimizer = fabric.setup(model, optimizer)\nfabric.backward(model(x).sum())\noptimizer.step()\n"
        "print(T)\n"
    ),
    ACCELERATE: (
        "import time, torch\nfrom accelerate import Accelerator\n"
        "t = time.perf_counter(); accelerator = Accelerator(cpu=True); T = time.perf_counter() - t\n"
        + _MODEL
        + "model, optimizer = accelerator.prepare(model, optimizer)\naccelerator.backward(model(x).sum())\n"
        "optimizer.step()\nprint(T)\n"
    ),
}
_LIBRARY = {LIGHTNING: "lightning_fabric", ACCELERATE: "accelerate"}


def _environment() -> dict[str, str]:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def _run(code: str) -> tuple[float, float, float | None]:
    """Run ``code`` in a new interpreter; (CPU seconds, wall seconds, construction seconds or ``None``)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_environment()
    )
    killer = threading.Timer(_TIMEOUT, process.kill)
    killer.start()
    try:
        assert process.stdout is not None
        out = process.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(process.pid, 0)  # wait4, not wait(): the child's own CPU time
    finally:
        killer.cancel()
    elapsed = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"start-up script exited {process.returncode}: {out[-2000:]}")
    last = out.split()[-1] if out.split() else ""
    return usage.ru_utime + usage.ru_stime, elapsed, float(last) if last.replace(".", "", 1).isdigit() else None


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure the start-up rows.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        The rows ``first_step``, ``construct_cold`` and ``ddp_first_step`` (those selected).
    """
    wanted = set(ROWS) if rows is None else rows & set(ROWS)
    return _collect_single(quick, wanted) + rows_startup_ddp.collect(quick, wanted)


def _collect_single(quick: bool, wanted: set[str]) -> list[RowResult]:
    """The one-process rows among ``wanted``."""
    if not wanted & {"first_step", "construct_cold"}:
        return []
    compiled = _byte_compile_fabric_core()
    scripts = {RAW: _SCRIPTS[RAW], AA: _SCRIPTS[RAW], CORE: _SCRIPTS[CORE]}
    scripts.update({v: _SCRIPTS[v] for v, module in _LIBRARY.items() if _installed(module)})
    wall: dict[str, list[float]] = {v: [] for v in scripts}
    construct: dict[str, list[float]] = {v: [] for v in scripts}

    def measure(variant: str) -> float:
        cpu, elapsed, constructed = _run(scripts[variant])
        wall[variant].append(elapsed)
        if constructed is not None:
            construct[variant].append(constructed)
        return cpu

    measures: dict[str, Measure] = {v: functools.partial(measure, v) for v in scripts}
    values = interleave(measures, rounds=3 if quick else 16, seed=3, warmup=0 if quick else 1)
    counted = len(values[RAW])  # the warm-up rounds came first: the last ones counted
    wall = {v: samples[-counted:] for v, samples in wall.items()}
    construct = {v: samples[-counted:] for v, samples in construct.items() if samples}
    labels = {v: "python -c <the same MLP loop>" for v in values}
    note = (
        f"One forward, backward and SGD step of a small MLP on the CPU, then exit. fabric-core's packages "
        f"({', '.join(compiled)}) were byte-compiled first, as an install does."
    )
    results: list[RowResult] = []
    if "first_step" in wanted:
        row = row_result(
            "first_step",
            "process start to the first optimizer step (CPU time), x raw PyTorch",
            values,
            goal=Goal("<=", 1.03),
            labels=labels,
            note="CPU time (user + system) of the whole process. " + note,
        )
        row.extra["wall_seconds"] = {v: Spread.of(s).as_dict() for v, s in wall.items()}
        results.append(row)
    if "construct_cold" in wanted:
        reference = {RAW: values[RAW], AA: values[AA]}
        results.append(
            row_result(
                "construct_cold",
                "first construction in a fresh process, x raw process start to first step",
                {**reference, **construct},
                goal=Goal("<=", 0.05),
                labels={**labels, CORE: "Fabric(accelerator='cpu', devices=1)", ACCELERATE: "Accelerator(cpu=True)"},
                note="Wall time of the constructor inside the process (after the import); raw: the whole "
                "process of `first_step` (CPU time), so the ratio is the share of a start the construction costs.",
            )
        )
    return results
