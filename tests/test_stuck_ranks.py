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

JOB = Path(__file__).parent / "_jobs" / "stuck_job.py"

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


def run_job(mode: str, deadline: float, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = run_in_own_session([sys.executable, str(JOB), mode], timeout=deadline, env={**os.environ, **env})
    return result, time.monotonic() - start


def test_mismatched_all_reduce_shapes_raise_the_same_error_on_every_rank() -> None:
    result, _ = run_job("mismatch", deadline=60)
    # A Python error's exit code, not SIGABRT (134 / -6) from gloo.
    assert result.returncode == 1, result.stdout
    message = "`all_reduce` needs a tensor of the same shape and dtype on every rank"
    for rank in (0, 1):
        lines = [line for line in result.stdout.splitlines() if line.startswith(f"[rank{rank}]: ValueError")]
        assert len(lines) == 1, result.stdout
        assert message in lines[0]
        assert "rank 0: float32[2], rank 1: float32[3]" in lines[0]
