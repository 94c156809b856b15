"""FSDP on CUDA GPUs: the CPU scenarios over NCCL, plus CPU offload and fp16 loss scaling (GPU-only).

Marked ``cuda`` and skipped without a CUDA GPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.timeout(300),
    pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("fabric_core_cuda") is None, reason="needs fabric-core-cuda"),
]
two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs")


@pytest.mark.parametrize(
    ("strategy", "precision", "scaler"),
    [("fsdp", "32-true", None), ("fsdp", "16-mixed", "ShardedGradScaler"), ("fsdp_cpu_offload", "32-true", None)],
)
def test_one_gpu_trains_and_round_trips_a_sharded_checkpoint(
    tmp_path: Path, run_job: Any, reports: Any, strategy: str, precision: str, scaler: str | None
) -> None:
    run_job("fsdp_gpu_job.py", strategy, precision, tmp_path, timeout=280)
    (report,) = reports(tmp_path, ranks=1)
    assert report["precision"] == "FSDPPrecision"
    assert report["scaler"] == scaler
    assert report["param_device"] == ("cpu" if strategy == "fsdp_cpu_offload" else "cuda")
    assert report["last_loss"] < report["first_loss"]
    assert (report["step"], report["equal"]) == (20, True)


@pytest.mark.multiprocess
@two_gpus
def test_two_gpus_train_like_one_process(tmp_path: Path, run_job: Any, reports: Any) -> None:
    run_job("fsdp_train_job.py", "popen", "cuda", tmp_path, timeout=280)
    for report in reports(tmp_path):
        assert report["local_numel"] * 2 == report["total_numel"] == 180
        for key in ("diff_after_clip_norm", "diff_after_clip_value", "diff_after_accumulation", "diff_joint_setup"):
            assert report[key] < 1e-5, key
        for sharded, reference in report["norms"]:
            assert sharded == pytest.approx(reference, rel=1e-4)
        assert report["after_gather_first_last"] == [3.0, 3.0]
        assert report["bf16_output_dtype"] == "torch.bfloat16"
        assert report["fp16_step_skipped"] is True


@pytest.mark.multiprocess
@two_gpus
def test_two_gpus_save_and_load_sharded_and_full_checkpoints(tmp_path: Path, run_job: Any, reports: Any) -> None:
    run_job("fsdp_checkpoint_job.py", "cuda", tmp_path, timeout=280)
    for report in reports(tmp_path):
        assert report["sharded_load_equal"] is True
        assert report["full_load_equal"] is True
        assert report["empty_init"]["meta_before_setup"] is True
        assert report["equal_after_another_step"] is True
