"""Start-up of a 2-process ddp job: from starting the launcher to the first optimizer step of both workers.

- raw: ``torchrun --nproc-per-node 2`` of a plain loop: ``init_process_group("gloo")``,
  ``DistributedDataParallel`` around a small MLP, one forward, backward and SGD step;
- fabric-core: ``fabric-core run --accelerator cpu --devices 2 --strategy ddp`` of the same loop written with
  ``Fabric()``, ``setup`` and ``fabric.backward``;
- lightning: Lightning Fabric's ``fabric run`` (``python -m lightning_fabric.cli``) with the same options and
  the same script on ``lightning_fabric``.

Each worker prints ``first-step RANK TIME`` (``time.time()``) right after its first optimizer step. A round's
value is the later of the two workers' times minus the time just before the launcher was started: wall time,
since a job is processes waiting for each other. The JSON also keeps each job's CPU time (launcher and
workers until exit, from ``wait4``), which another job on the machine disturbs less.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _harness import AA, CORE, LIGHTNING, RAW, Goal, Measure, RowResult, Spread, interleave, row_result
from rows_import import _byte_compile_fabric_core, _installed

__all__ = ["collect"]

ROWS = ("ddp_first_step",)
_TIMEOUT = 300
_MARKER = re.compile(r"first-step (\d+) (\d+\.\d+)")

_MODEL = "torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))"
#: One write of the whole line: the workers share the launcher's output, unbuffered when PYTHONUNBUFFERED is set.
_PRINT = 'print(f"first-step {RANK} {time.time()!r}\\n", end="", flush=True)\n'
#: One script per variant. Each ends its process right after its marker: what follows is not measured, and
#: gloo's teardown on the CPU now and then aborts a worker (``terminate called without an active exception``).
_EXIT = "os._exit(0)\n"
_SCRIPTS = {
    RAW: (
        "import os\nimport time\nimport torch\nimport torch.distributed as dist\n"
        "from torch.nn.parallel import DistributedDataParallel\n\n"
        'dist.init_process_group("gloo")\n'
        f"model = DistributedDataParallel({_MODEL})\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model(torch.randn(16, 32)).sum().backward()\noptimizer.step()\n"
        + _PRINT.replace("RANK", "dist.get_rank()")
        + _EXIT
    ),
    CORE: (
        "import os\nimport time\nimport torch\nfrom fabric_core import Fabric\n\n"
        f"fabric = Fabric()\nmodel = {_MODEL}\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, optimizer = fabric.setup(model, optimizer)\n"
        "fabric.backward(model(torch.randn(16, 32)).sum())\noptimizer.step()\n"
        + _PRINT.replace("RANK", "fabric.global_rank")
        + _EXIT
    ),
}
_SCRIPTS[LIGHTNING] = _SCRIPTS[CORE].replace("from fabric_core import", "from lightning_fabric import")
_OPTIONS = ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tool(name: str, module: str) -> list[str]:
    """The console script ``name`` installed beside this interpreter, else ``python -m module``."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


def _commands(folder: Path) -> dict[str, list[str]]:
    """The command per variant, with ``{port}`` where it needs a free port of its own."""
    raw = [*_tool("torchrun", "torch.distributed.run"), "--nproc-per-node", "2"]
    raw += ["--master-addr", "127.0.0.1", "--master-port", "{port}", str(folder / "raw.py")]
    commands = {
        RAW: raw,
        # fabric-core's default: with no --main-port a one-node job binds a free port itself.
        CORE: [*_tool("fabric-core", "fabric_core"), "run", *_OPTIONS, str(folder / "core.py")],
    }
    if _installed("lightning_fabric"):
        commands[LIGHTNING] = [sys.executable, "-m", "lightning_fabric.cli", *_OPTIONS, "--main-port", "{port}"]
        commands[LIGHTNING].append(str(folder / "lightning.py"))
    return commands


def _environment() -> dict[str, str]:
    skip = ("FABRIC_CORE_", "LT_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK", "PET_")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def run_job(command: list[str], timeout: float = _TIMEOUT) -> tuple[float, float]:
    """Run one job; (seconds from its start to the first step of both workers, CPU seconds of the job)."""
    command = [part.replace("{port}", str(_free_port())) for part in command]
    started = time.time()
    # A session of its own: past the timeout, the launcher and its workers are killed together.
    job = subprocess.Popen(
        command, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    killer = threading.Timer(timeout, os.killpg, (job.pid, signal.SIGKILL))
    killer.start()
    try:
        assert job.stdout is not None
        out = job.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(job.pid, 0)  # the job's own CPU time and that of the workers it waited for
    finally:
        killer.cancel()
    job.returncode = os.waitstatus_to_exitcode(status)
    steps = {int(rank): float(at) for rank, at in _MARKER.findall(out)}
    if job.returncode != 0 or sorted(steps) != [0, 1]:
        raise RuntimeError(f"{' '.join(command)} exited {job.returncode}, first steps {steps}: {out[-2000:]}")
    return max(steps.values()) - started, usage.ru_utime + usage.ru_stime


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure the job start-up row.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        The row ``ddp_first_step`` (if selected).
    """
    if rows is not None and "ddp_first_step" not in rows:
        return []
    _byte_compile_fabric_core()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for variant, name in ((RAW, "raw.py"), (CORE, "core.py"), (LIGHTNING, "lightning.py")):
            (folder / name).write_text(_SCRIPTS[variant])
        commands = _commands(folder)
        commands[AA] = commands[RAW]
        cpu: dict[str, list[float]] = {v: [] for v in commands}

        def measure(variant: str) -> float:
            wall, used = run_job(commands[variant])
            cpu[variant].append(used)
            return wall

        measures: dict[str, Measure] = {v: functools.partial(measure, v) for v in commands}
        values = interleave(measures, rounds=3 if quick else 8, seed=5, warmup=0 if quick else 1)
    counted = len(values[RAW])
    options = " ".join(_OPTIONS)
    labels = {
        RAW: "torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port PORT raw.py",
        CORE: f"fabric-core run {options} core.py",
        LIGHTNING: f"fabric run {options} --main-port PORT lightning.py (python -m lightning_fabric.cli)",
    }
    cpu_ratios = {
        v: Spread.of([a / b for a, b in zip(s[-counted:], cpu[RAW][-counted:])]) for v, s in cpu.items() if v != RAW
    }
    row = row_result(
        "ddp_first_step",
        "2-process ddp job: launcher start to the first optimizer step of both workers (wall), x torchrun",
        values,
        goal=Goal("<=", 1.05),
        labels={v: label for v, label in labels.items() if v in values},
        note=(
            "gloo on 127.0.0.1, a small MLP, one SGD step per worker, then exit; the later worker's step counts. "
            "The raw loop: init_process_group, DistributedDataParallel, forward, backward, step. Each job's CPU "
            "time (launcher and workers, to exit), x raw: "
            + "; ".join(f"{v} {spread.fmt()}" for v, spread in cpu_ratios.items())
            + "."
        ),
    )
    row.extra["cpu_seconds"] = {v: Spread.of(s[-counted:]).as_dict() for v, s in cpu.items()}
    row.extra["cpu_ratio"] = {v: spread.as_dict() for v, spread in cpu_ratios.items()}
    return [row]
