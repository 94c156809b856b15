"""Recovery after a killed worker: ``fabric-core run --max-restarts 1 --devices 2 --strategy ddp``.

Each round is one real job of the test suite's restart script (``tests/_jobs/restart_job.py``: a small
model, ``fabric.save`` every 5 steps, ``fabric.load`` at the top). Rank 1 is killed with SIGKILL from outside
once it reached step 6; the agent restarts both workers, which load the step-5 checkpoint and go on.

- raw: the job's own start-up, from starting the launcher to the first step of the slower rank;
- fabric-core: from the SIGKILL to the first step after the resume (slower rank).

The ratio is the recovery as a fraction of the start-up, per job (the goal: at most 1.5).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import CORE, RAW, Goal, RowResult, row_result

__all__ = ["collect"]

ROWS = ("recovery",)
SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "_jobs" / "restart_job.py"
KILL_AT = 6


def _environment() -> dict[str, str]:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK", "PET_")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def _first_step(outdir: Path, attempt: int) -> float:
    """The wall-clock time of the first step of ``attempt``, on the rank that got there last."""
    return max(float(outdir.joinpath(f"attempt{rank}-{attempt}").read_text().split()[2]) for rank in (0, 1))


def _in_worker(outdir: Path, attempt: int) -> float:
    """Seconds from the worker process's start (before ``import torch``) to its first step, slower rank."""
    return max(float(outdir.joinpath(f"attempt{rank}-{attempt}").read_text().split()[1]) for rank in (0, 1))


def one_job(outdir: Path, timeout: float = 300) -> tuple[float, float, float]:
    """Run one job, kill rank 1 at step :data:`KILL_AT`.

    Returns:
        The start-up and the recovery (seconds), and of the recovery the part spent inside the restarted
        workers (their imports, process group, checkpoint load); the rest is the agent noticing the death,
        stopping the other worker, the rendezvous and starting the processes.
    """
    command = [sys.executable, "-m", "fabric_core", "run", "--max-restarts", "1"]
    command += ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", str(SCRIPT), str(outdir)]
    command += ["40", "5", "0.05"]
    started = time.time()
    job = subprocess.Popen(command, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        progress, end = outdir / "progress1", time.monotonic() + timeout
        while True:
            if time.monotonic() > end:
                raise TimeoutError(f"rank 1 did not reach step {KILL_AT} within {timeout} s")
            if progress.exists():
                pid, step, _ = progress.read_text().split()
                if int(step) >= KILL_AT:
                    killed = time.time()
                    os.kill(int(pid), signal.SIGKILL)
                    break
            time.sleep(0.005)
        _, err = job.communicate(timeout=timeout)
        if job.returncode != 0:
            raise RuntimeError(f"the job failed ({job.returncode}): {err[-2000:]}")
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    return _first_step(outdir, 0) - started, _first_step(outdir, 1) - killed, _in_worker(outdir, 1)


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure recovery against start-up.

    Args:
        quick: Fewer jobs.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        The ``recovery`` row (if selected).
    """
    if rows is not None and "recovery" not in rows:
        return []
    startups: list[float] = []
    recoveries: list[float] = []
    in_workers: list[float] = []
    for _ in range(2 if quick else 5):
        with tempfile.TemporaryDirectory() as tmp:
            startup, recovery, in_worker = one_job(Path(tmp))
        startups.append(startup)
        recoveries.append(recovery)
        in_workers.append(in_worker)
    row = row_result(
        "recovery",
        "recovery after a killed worker (2-process ddp, --max-restarts 1), time",
        {RAW: startups, CORE: recoveries},
        goal=Goal("<=", 1.5),
        labels={
            RAW: "the job's start-up: launcher start -> first step (slower rank)",
            CORE: "SIGKILL of rank 1 -> first step after the resume (slower rank)",
        },
        note=(
            "One job per round, both values from the same job; no A/A row (one start-up per job). Of the"
            f" recovery, the restarted workers' own start (imports, process group, load) took"
            f" {statistics.median(in_workers):.1f} s (median) of {statistics.median(recoveries):.1f} s."
        ),
    )
    row.extra["recovery_inside_workers_s"] = in_workers
    return [row]
