"""Runs a test file as its own two-process DeepSpeed job and reads what each rank reported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

JobRunner = Callable[[str, Path, float], list[dict[str, Any]]]


def _run_job(script: str, out_dir: Path, timeout: float, world_size: int = 2) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_") and k not in ("LOCAL_RANK", "RANK")}
    job = subprocess.Popen(
        [sys.executable, script, str(out_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    try:
        output, _ = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # the job and the ranks it started
        output, _ = job.communicate()
        pytest.fail(f"the two-process DeepSpeed job did not finish in {timeout} s:\n{output}")
    assert job.returncode == 0, output
    return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(world_size)]


@pytest.fixture(scope="session")
def run_job() -> JobRunner:
    """``run_job(script, out_dir, timeout)``: run ``script OUT_DIR`` in its own session; the ranks' reports."""
    return _run_job
