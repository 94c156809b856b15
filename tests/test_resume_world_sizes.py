"""Bit-identical resume at every world size: 1 to 4 processes under ddp, 2 and 4 under fsdp.

One job per case runs ``examples/fault_tolerant.py`` under ``fabric-core run --max-restarts 3`` and loses a
worker to ``SIGKILL`` three times: right after a checkpoint was saved, on an epoch boundary and in the middle of
an epoch (the last at a random step, which the failure message names). The agent restarts every worker each
time, the script resumes from the newest complete checkpoint, and the job must end with the digest of the
same command run without interruption alongside it.

With three or more processes the order in which the processes' gradients are added depends on DDP's bucket
layout; this is where a resumed run used to drift (see ``fabric_core_ddp._stable_buckets``). These jobs are
heavy for a 2-core machine (up to eight processes at once), so they carry the ``world_sizes`` marker and CI
runs them in a step of their own.
"""

from __future__ import annotations

import math
import os
import random
import signal
import sys
from pathlib import Path

import pytest

from tests.test_fault_tolerant import SCRIPT, Job, environment, finished, free_port, workers

SAMPLES, BATCH = 256, 16  # examples/fault_tolerant.py's dataset and batch size
STEPS, EVERY = 40, 5
CASES = [("ddp", 1), ("ddp", 2), ("ddp", 3), ("ddp", 4), ("fsdp", 2), ("fsdp", 4)]


def command(directory: Path, strategy: str, processes: int, restarts: int) -> list[str]:
    return [
        *(sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", str(processes)),
        *("--strategy", strategy, "--main-port", str(free_port()), "--max-restarts", str(restarts)),
        *(str(SCRIPT), "--steps", str(STEPS), "--every", str(EVERY), "--step-seconds", "0.05"),
        *("--dir", str(directory)),
    ]


def kill_steps(processes: int, rng: random.Random) -> list[int]:
    """Right after the step-10 save; the first epoch boundary from step 14; a step inside a later epoch."""
    per_epoch = math.ceil(math.ceil(SAMPLES / processes) / BATCH)  # batches each rank draws per epoch
    boundary = per_epoch * math.ceil(14 / per_epoch)
    inside = [s for s in range(boundary + EVERY + 1, STEPS - 3) if s % per_epoch and s % EVERY]
    return [EVERY * 2 + 1, boundary, rng.choice(inside)]


@pytest.mark.world_sizes
@pytest.mark.timeout(420)
@pytest.mark.parametrize(("strategy", "processes"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_a_job_that_loses_a_worker_three_times_ends_with_the_uninterrupted_digest(
    tmp_path: Path, strategy: str, processes: int
) -> None:
    if strategy == "fsdp":
        pytest.importorskip("fabric_core_fsdp")
    env = environment()
    rng = random.Random()
    steps = kill_steps(processes, rng)
    what = f"{strategy} x{processes}, workers killed at steps {steps}"
    straight = Job(command(tmp_path / "straight", strategy, processes, restarts=0), env)
    job = Job(command(tmp_path / "broken", strategy, processes, restarts=len(steps)), env)
    try:
        resumed: list[int] = []
        victims: list[int] = []
        for number, step in enumerate(steps):
            if number:
                resumed.append(int(job.wait_for(r"^resumed at step (\d+)$").group(1)))
            job.wait_for(rf"^step {step} ")
            victim = rng.choice(workers(job.process.pid))
            os.kill(victim, signal.SIGKILL)
            victims.append(victim)
        resumed.append(int(job.wait_for(r"^resumed at step (\d+)$").group(1)))
        digest, out = finished(job)
        # Each resume starts from the newest checkpoint at or before the step its worker was lost in.
        assert all(r % EVERY == 0 and r <= s for r, s in zip(resumed, steps, strict=True)), (what, resumed)
        assert out.count("restarting every worker") == len(steps), out[-3000:]
        assert all(f"pid {victim}" in out for victim in victims), out[-3000:]  # each loss names its worker
        assert digest == finished(straight)[0], what
    finally:
        job.kill()
        straight.kill()


def test_the_kill_steps_fall_where_their_names_say() -> None:
    rng = random.Random(0)
    for processes in (1, 2, 3, 4):
        per_epoch = math.ceil(math.ceil(SAMPLES / processes) / BATCH)
        after_save, boundary, inside = kill_steps(processes, rng)
        assert after_save == 11 and boundary % per_epoch == 0 and boundary >= 14
        assert inside % per_epoch and inside % EVERY and boundary < inside < STEPS
