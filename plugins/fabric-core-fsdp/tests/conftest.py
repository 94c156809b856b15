"""Runs the job scripts of ``_jobs/`` the way users run theirs, and reads what each rank reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

JOBS = Path(__file__).parent / "_jobs"
JobRunner = Callable[..., None]


def _run_job(script: str, *args: str | Path, timeout: float = 150) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MASTER_PORT", "LOCAL_RANK")}
    command = [sys.executable, str(JOBS / script), *(str(a) for a in args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ, cwd=JOBS)
    assert result.returncode == 0, (
        f"{script} exited with {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    )


@pytest.fixture(scope="session")
def run_job() -> JobRunner:
    """``run_job(script, *args)``: run ``_jobs/<script>``; fail with its output unless it exits 0."""
    return _run_job


def read_reports(outdir: Path, ranks: int = 2) -> list[dict[str, Any]]:
    return [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(ranks)]


@pytest.fixture(scope="session")
def reports() -> Callable[..., list[dict[str, Any]]]:
    """``reports(outdir, ranks=2)``: the JSON each rank of a job wrote to ``outdir/rank<N>.json``."""
    return read_reports
