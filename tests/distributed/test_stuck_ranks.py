"""Misbehaving ranks end the job with the cause printed, in seconds: real processes on gloo, with deadlines.

Each test runs tests/_jobs/stuck_job.py (two ranks through the popen launcher) in its own session, so a job
that hangs is killed with every rank it started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric_core.testing import run_in_own_session

JOB = Path(__file__).parents[1] / "_jobs" / "stuck_job.py"

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


def run_job(mode: str, deadline: float, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = run_in_own_session([sys.executable, str(JOB), mode], timeout=deadline, env={**os.environ, **env})
    return result, time.monotonic() - start


def test_mismatched_all_reduce_shapes_raise_the_same_error_on_every_rank() -> None:
    result, _ = run_job("mismatch", deadline=90)
    # A Python error ends the job, not SIGABRT from gloo (134, or -6 seen from outside).
    assert result.returncode not in (0, 134, -6), result.stdout
    assert "terminate called" not in result.stdout and "Aborted" not in result.stdout
    message = (
        "`all_reduce` needs a tensor of the same shape and dtype on every rank, but the ranks passed different "
        "ones (rank 0: float32[2], rank 1: float32[3])"
    )
    for rank in (0, 1):
        assert f"rank {rank} raised: {message}" in result.stdout, result.stdout
        assert f"rank {rank} met the other rank after the error" in result.stdout


def test_a_rank_stuck_in_a_barrier_ends_the_job_in_seconds_not_the_collective_timeout() -> None:
    # Rank 0 returns while rank 1 waits in a barrier: rank 0's exit barrier gives up after 3 s (instead of the
    # process group's 30 minutes), closes its connections, and rank 1's barrier fails with a traceback.
    result, seconds = run_job("exit", deadline=90, FABRIC_CORE_EXIT_TIMEOUT="3")
    assert result.returncode != 0, result.stdout
    assert "rank 0 returns" in result.stdout
    assert re.search(r"\[fabric-core rank 0\] the ranks did not all reach the end of the job within 3 s", result.stdout)
    assert "Cause: ranks [1] did not arrive" in result.stdout  # names the rank that did not come
    assert re.search(r"\[rank1\]:.*in barrier", result.stdout), result.stdout  # the stuck rank's barrier
    assert seconds < 90


def test_a_collective_waiting_past_the_threshold_says_which_and_from_where() -> None:
    # Rank 1 joins the all_reduce 6 s late; with a 2 s threshold rank 0 reports while it waits.
    result, _ = run_job("late", deadline=90, FABRIC_CORE_HANG_WARN_SECONDS="2", FABRIC_CORE_RENDEZVOUS_TIMEOUT="30")
    assert result.returncode == 0, result.stdout
    line = next(line for line in JOB.read_text().splitlines() if "# LATE_LINE" in line)
    number = JOB.read_text().splitlines().index(line) + 1
    report = re.search(
        r"\[fabric-core rank 0\] waiting (\d+) s in `all_reduce` \(ParallelStrategy\.all_reduce", result.stdout
    )
    assert report, result.stdout
    assert 2 <= int(report.group(1)) < 6
    assert f"called from {os.path.relpath(JOB)}:{number}." in result.stdout  # relative to the working folder
    assert "[fabric-core rank 1] waiting" not in result.stdout  # rank 1 never waited
    assert "rank 0 reduced 2.0" in result.stdout and "rank 1 reduced 2.0" in result.stdout
    # The meeting waited at most 30 s; the collectives then got the job's timeout back (30 minutes).
    assert "rank 0 timeouts after the rendezvous: 0:30:00 0:30:00" in result.stdout
