"""Real CUDA runs: one GPU in each precision, DDP over NCCL, FSDP, and checkpoint round trips.

Marked ``cuda`` and skipped without a CUDA GPU (``scripts/gpu_check.sh`` runs them on a GPU machine). Each
test runs ``_jobs/gpu_job.py`` as a script, the way users run theirs, and checks what every rank wrote.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fabric_core_cuda.accelerator import num_cuda_devices

JOB = Path(__file__).parent / "_jobs" / "gpu_job.py"
GPUS = num_cuda_devices()

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU")]


def run_job(tmp_path: Path, strategy: str, devices: int, precision: str) -> list[dict[str, Any]]:
    command = [sys.executable, str(JOB), str(tmp_path), strategy, str(devices), precision]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(devices)]
    assert [r["rank"] for r in reports] == list(range(devices))
    return reports


def check_training(report: dict[str, Any]) -> None:
    assert report["last_loss"] < 0.5 * report["first_loss"], report
    assert report["checkpoint_equal"] is True
    assert (report["restored_step"], report["remainder"]) == (30, [])
    assert report["output_dtype"] == "torch.float32"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed", "bf16-true"])
def test_single_gpu_training_and_checkpoint(tmp_path: Path, precision: str) -> None:
    import torch

    if precision.startswith("bf16") and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    (report,) = run_job(tmp_path, "auto", 1, precision)
    check_training(report)
    assert (report["strategy"], report["device"], report["current_device"]) == ("SingleDeviceStrategy", "cuda:0", 0)
    assert report["param_device"] == "cuda:0"
    expected = {
        "32-true": "Precision",
        "16-mixed": "MixedPrecision",
        "bf16-mixed": "MixedPrecision",
        "bf16-true": "HalfPrecision",
    }
    assert report["precision"] == expected[precision]
    assert report["scaler_device"] == ("cuda" if precision == "16-mixed" else None)
    assert report["summed"] == 1.0


@pytest.mark.timeout(300)
@pytest.mark.multiprocess
@pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.skipif(importlib.util.find_spec("fabric_core_ddp") is None, reason="needs fabric-core-ddp")
def test_ddp_over_nccl_on_two_gpus(tmp_path: Path) -> None:
    reports = run_job(tmp_path, "ddp", 2, "32-true")
    for rank, report in enumerate(reports):
        check_training(report)
        assert report["strategy"] == "DDPStrategy"
        assert (report["backend"], report["world_size"]) == ("nccl", 2)
        assert (report["device"], report["current_device"]) == (f"cuda:{rank}", rank)
        assert report["summed"] == 3.0


@pytest.mark.timeout(300)
@pytest.mark.multiprocess
@pytest.mark.skipif(importlib.util.find_spec("fabric_core_fsdp") is None, reason="needs fabric-core-fsdp")
def test_fsdp_training_and_sharded_checkpoint(tmp_path: Path) -> None:
    devices = min(GPUS, 2)
    reports = run_job(tmp_path, "fsdp", devices, "bf16-mixed" if _bf16() else "32-true")
    for rank, report in enumerate(reports):
        check_training(report)
        assert report["strategy"] == "FSDPStrategy"
        assert report["device"] == f"cuda:{rank}"
        assert report["backend"] == "nccl"


def _bf16() -> bool:
    import torch

    return bool(torch.cuda.is_bf16_supported())
