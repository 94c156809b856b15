"""Two real processes train with Fabric(strategy="fsdp") next to an unsharded model (one job, many checks).

The job (``_jobs/fsdp_train_job.py``) runs through the default launcher: the script runs again as rank 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory, run_job: Any, reports: Any) -> list[dict[str, Any]]:
    outdir: Path = tmp_path_factory.mktemp("fsdp-train")
    run_job("fsdp_train_job.py", "popen", "cpu", outdir)
    found: list[dict[str, Any]] = reports(outdir)
    assert [r["rank"] for r in found] == [0, 1]
    assert {r["world_size"] for r in found} == {2}
    return found


def test_each_rank_holds_half_of_the_parameters(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["all_dtensor"] is True
        assert report["total_numel"] == 180
        assert report["local_numel"] == 90


def test_the_wrap_policy_makes_each_block_its_own_unit(ranks: list[dict[str, Any]]) -> None:
    assert ranks[0]["units"] == ["FSDPBlock", "FSDPSequential"]


def test_the_root_keeps_its_gathered_parameters_for_backward_unless_asked(ranks: list[dict[str, Any]]) -> None:
    # The root's parameters are the first backward needs: re-gathering them would only add communication.
    for report in ranks:
        assert report["resharded_after_forward"] == {"block": True, "root": False}
        assert report["resharded_after_forward_when_asked"] == {"block": True, "root": True}


def test_half_batches_train_like_one_process_on_the_full_batch(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["diff_after_clip_norm"] < 1e-6


def test_clip_by_norm_returns_the_norm_of_the_unsharded_gradients(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["norm_type"] == "Tensor"  # a plain tensor, not a DTensor
        for sharded, reference in report["norms"]:
            assert sharded == pytest.approx(reference, rel=1e-5)
            assert sharded > 0.05  # so clipping to 0.05 really scaled the gradients
    assert ranks[0]["norms"] == ranks[1]["norms"]


def test_clip_by_value_clamps_every_shard(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["max_grad_after_clip_value"] == pytest.approx(0.01)
        assert report["diff_after_clip_value"] < 1e-6


def test_no_backward_sync_accumulates_without_reducing(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["sharded_grads_while_unsynced"] == 0
        assert report["diff_after_accumulation"] < 1e-6


def test_gathered_parameters_are_whole_and_keep_the_modifiers_edits(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["gathered_shape"] == [4, 8]
        assert report["gathered_is_dtensor"] is False
        # Rank 0 wrote 3.0 and rank 1 wrote 4.0: rank 0's edit reached both halves on both ranks.
        assert report["after_gather_first_last"] == [3.0, 3.0]


def test_an_optimizer_created_before_setup_is_refused_with_a_hint(ranks: list[dict[str, Any]]) -> None:
    message = ranks[0]["early_optimizer_error"]
    assert message is not None
    assert "does not seem to reference any sharded parameters" in message
    assert "fabric.setup_module(model)" in message


def test_setup_with_an_optimizer_points_it_at_the_shards(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["joint_optimizer_dtensors"] is True
        assert report["diff_joint_setup"] < 1e-6


def test_hybrid_shard_grad_op_with_activation_checkpointing_trains_alike(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["hybrid_placements"] == ["R", "S(0)"]
        assert report["checkpoint_wrapped"] == 2
        assert report["diff_hybrid"] < 1e-6


def test_bf16_mixed_computes_in_bf16_and_keeps_fp32_shards(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["bf16_output_dtype"] == "torch.bfloat16"
        assert report["bf16_param_dtype"] == "torch.float32"


def test_16_mixed_skips_the_step_on_every_rank_when_one_overflows(ranks: list[dict[str, Any]]) -> None:
    # Only rank 1 put an inf in its gradient shard; both ranks skipped and halved the scale.
    for report in ranks:
        assert report["fp16_step_skipped"] is True
        assert report["fp16_scale_after_overflow"] == 2.0**15
