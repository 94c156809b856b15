"""Runs a test file as its own two-process DeepSpeed job and reads what each rank reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fabric_core.testing import run_in_own_session

JobRunner = Callable[[str, Path, float], list[dict[str, Any]]]


def _run_job(script: str, out_dir: Path, timeout: float, world_size: int = 2) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_") and k not in ("LOCAL_RANK", "RANK")}
    try:
        job = run_in_own_session([sys.executable, script, str(out_dir)], timeout, env=env)
    except subprocess.TimeoutExpired as timed_out:
        pytest.fail(f"the two-process DeepSpeed job did not finish in {timeout} s:\n{timed_out.output}")
    assert job.returncode == 0, job.stdout
    return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(world_size)]


@pytest.fixture(scope="session")
def run_job() -> JobRunner:
    """``run_job(script, out_dir, timeout)``: run ``script OUT_DIR`` in its own session; the ranks' reports."""
    return _run_job
