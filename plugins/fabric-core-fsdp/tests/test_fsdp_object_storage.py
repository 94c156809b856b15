"""Sharded checkpoints in an S3 bucket (a local moto server, through s3fs) from two real processes.

FSDP (in the foreground) and model_parallel (with ``AsyncCheckpointIO``, in the background) each save a sharded
folder, a full file and run checkpoints into the bucket and load them back; ``fabric-core consolidate`` then
reads the sharded folder from the bucket. Lightning's FSDP and ModelParallel strategies turned ``s3://`` into
``s3:/`` (Lightning #20749, #21779, #21797): here every key lands where its URL says, and no local ``s3:``
folder appears.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core.cli import main
from fabric_core.run_checkpoints import MARKER
from tests.object_storage import keys, s3

JOBS = Path(__file__).parent / "_jobs"


@pytest.mark.object_storage
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("strategy", "background"), [("fsdp", False), ("model_parallel", True)])
def test_sharded_checkpoints_in_a_bucket_keep_their_url_and_load_back(
    strategy: str, background: bool, s3_bucket: str, tmp_path: Path, run_job: Any
) -> None:
    run_job("fsdp_object_storage_job.py", strategy, "1" if background else "0", s3_bucket, tmp_path)
    reports = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for report in reports:
        assert report["sharded"] == {"step": 2, "equal": {"model": True, "exp_avg": True}}
        assert report["resumed_step"] == 2 and report["resumed"] == {"model": True, "exp_avg": True}
        assert report["saved_at"] == report["latest"] == f"{s3_bucket}/run/step-00000002"
        assert report["full"] == {"remainder": {"step": 2}, "equal": {"model": True}}

    stored = keys(s3_bucket)
    sharded = {".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"}
    assert {name.removeprefix("sharded/") for name in stored if name.startswith("sharded/")} == sharded
    # Pruned to the last run checkpoint; its marker lists every file of its state folder.
    run = [name.removeprefix("run/step-00000002/") for name in stored if name.startswith("run/")]
    assert sorted(run) == sorted([MARKER, *(f"state/{name}" for name in sharded)])
    marker = json.loads(s3().cat(f"{s3_bucket}/run/step-00000002/{MARKER}".removeprefix("s3://")))
    assert marker["world_size"] == 2 and sorted(marker["files"]) == sorted(f"state/{name}" for name in sharded)
    assert "full.ckpt" in stored
    assert not (JOBS / "s3:").exists() and not (tmp_path / "s3:").exists()

    # `fabric-core consolidate` reads the folder from the bucket: the tensors of step 2, whole.
    output = tmp_path / "whole.pt"
    assert main(["consolidate", f"{s3_bucket}/sharded", "--output", str(output)]) == 0
    whole = torch.load(output, weights_only=True)
    reference = torch.load(tmp_path / "reference.pt", weights_only=True)
    assert whole["step"] == 2
    assert all(torch.equal(a, b) for a, b in zip(whole["model"].values(), reference["model"], strict=True))
