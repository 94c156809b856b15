"""The GPU job (``_jobs/gpu_job.py``) itself works: run on the CPU, so it cannot rot between GPU runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).parent / "_jobs" / "gpu_job.py"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_gpu_job_trains_and_round_trips_a_checkpoint_on_the_cpu(tmp_path: Path) -> None:
    command = [sys.executable, str(JOB), str(tmp_path), "auto", "1", "bf16-true", "cpu"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "rank0.json").read_text())
    assert report["last_loss"] < 0.5 * report["first_loss"]
    assert (report["checkpoint_equal"], report["restored_step"], report["remainder"]) == (True, 30, [])
    assert (report["strategy"], report["precision"], report["device"]) == (
        "SingleDeviceStrategy",
        "HalfPrecision",
        "cpu",
    )
