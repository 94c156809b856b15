"""``fabric.save_raw`` and safetensors ``fabric.load_raw`` from real processes, each rank writing and reading its part.

FSDP2 (shards of dimension 0, uneven), model_parallel (tensor parallel x FSDP2: blocks cut along columns, and
rows held twice-sharded), ddp and FSDP1 save a Hugging Face folder and a single file that the ``safetensors``
package reads back whole, and load the folder into a model of another seed. Loading a sharded folder into FSDP2
adds, per rank, no more peak memory than its shard and one tensor (measured with the kernel's peak-RSS counter,
reset before the load).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(240)]


def _reports(outdir: Path, ranks: int) -> list[dict[str, Any]]:
    return [json.loads((outdir / f"rank{rank}.json").read_text()) for rank in range(ranks)]


@pytest.mark.parametrize(
    ("strategy", "devices"), [("fsdp", 2), ("fsdp", 3), ("model_parallel", 2), ("ddp", 2), ("fsdp1", 2)]
)
def test_weights_saved_by_every_rank_read_back_whole_and_load_into_a_fresh_model(
    strategy: str, devices: int, tmp_path: Path, run_job: Any
) -> None:
    run_job("fsdp_weights_job.py", strategy, str(devices), tmp_path, "roundtrip")
    reference = torch.load(tmp_path / "reference.pt", weights_only=True)
    single = load_file(tmp_path / "one.safetensors")
    index = json.loads((tmp_path / "folder" / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == sorted(reference) == sorted(single)
    assert len(set(index["weight_map"].values())) > 1
    for name, tensor in reference.items():
        assert torch.equal(single[name], tensor), name
        assert torch.equal(load_file(tmp_path / "folder" / index["weight_map"][name])[name], tensor), name
    for report in _reports(tmp_path, devices):
        assert report == {"result": [[], []], "equal": True, "differed_before": True}
    assert not [p for p in (tmp_path / "folder").iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("devices", [2, 4])
def test_loading_a_sharded_folder_into_fsdp_adds_at_most_a_shard_and_one_tensor_per_rank(
    devices: int, tmp_path: Path, run_job: Any
) -> None:
    run_job("fsdp_weights_job.py", "fsdp", str(devices), tmp_path, "memory")
    margin = 2 * 2**20  # the allocator and the interpreter's own small allocations
    for report in _reports(tmp_path, devices):
        assert report["exact"]
        assert report["shard"] == report["total"] // devices
        # Reading the whole model on every rank would add `total`, more than this bound.
        assert report["shard"] + report["tensor"] + margin < report["total"]
        assert report["added"] <= report["shard"] + report["tensor"] + margin, report
