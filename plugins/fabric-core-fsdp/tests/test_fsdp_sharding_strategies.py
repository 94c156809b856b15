"""Two real gloo processes train under each of Lightning's sharding strategies next to torch's DDP (one job).

The job (``_jobs/fsdp_sharding_job.py``) also covers ``sync_module_states``, an FSDP1 ``MixedPrecision`` and
16-mixed with the ``ShardedGradScaler`` Lightning code passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory, run_job: Any, reports: Any) -> list[dict[str, Any]]:
    outdir: Path = tmp_path_factory.mktemp("fsdp-sharding")
    run_job("fsdp_sharding_job.py", outdir)
    found: list[dict[str, Any]] = reports(outdir)
    assert [r["rank"] for r in found] == [0, 1]
    return found


@pytest.mark.parametrize("name", STRATEGIES)
def test_each_sharding_strategy_trains_as_ddp_does(ranks: list[dict[str, Any]], name: str) -> None:
    for report in ranks:
        # Gradients averaged over both ranks' half batches (NO_SHARD: all-reduced whole), then the same updates.
        assert report[name]["grad_diff"] < 1e-6
        assert report[name]["param_diff"] < 1e-6
        assert report[name]["reported"] == f"ShardingStrategy.{name}"


@pytest.mark.parametrize(
    ("name", "placements", "local_rows"),
    [
        ("FULL_SHARD", ["S(0)"], 4),
        ("SHARD_GRAD_OP", ["S(0)"], 4),
        ("NO_SHARD", ["R", "S(0)"], 8),  # a (2, 1) mesh: whole parameters on each rank
        ("HYBRID_SHARD", ["R", "S(0)"], 4),  # defaults to (nodes, devices) = (1, 2): sharded within the node
        ("_HYBRID_SHARD_ZERO2", ["R", "S(0)"], 8),  # device_mesh=(2, 1): replicated across the two
    ],
)
def test_parameters_are_sharded_or_whole_as_the_strategy_says(
    ranks: list[dict[str, Any]], name: str, placements: list[str], local_rows: int
) -> None:
    for report in ranks:
        assert report[name]["placements"] == placements
        assert report[name]["full_shape"] == [8, 8]
        assert report[name]["local_shape"] == [local_rows, 8]


def test_a_no_shard_checkpoint_loads_into_a_fully_sharded_model(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["no_shard_checkpoint_diff"] == 0.0


def test_replicas_and_sync_module_states_start_from_rank_zeros_weights(ranks: list[dict[str, Any]]) -> None:
    # Rank 1 built its model from another seed; NO_SHARD/_HYBRID_SHARD_ZERO2 above still match DDP, and
    # FULL_SHARD with sync_module_states=True holds exactly rank 0's initial weights.
    for report in ranks:
        assert report["synced_diff_to_rank0_init"] == 0.0


def test_fsdp1_mixed_precision_casts_buffers_and_keeps_fp32_shards(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["mp_output_dtype"] == "torch.bfloat16"
        assert report["mp_buffer_dtype"] == "torch.bfloat16"
        assert (report["mp_shard_dtype"], report["mp_grad_dtype"]) == ("torch.float32", "torch.float32")


def test_16_mixed_with_lightnings_sharded_grad_scaler_skips_on_every_rank(ranks: list[dict[str, Any]]) -> None:
    # Only rank 1 put an inf in its gradient shard.
    for report in ranks:
        assert report["sharded_scaler_skipped"] is True
        assert report["sharded_scaler_scale"] == 2.0**15
        assert report["sharded_scaler_stepped_after"] is True
