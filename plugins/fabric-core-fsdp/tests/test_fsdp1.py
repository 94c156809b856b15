"""FSDP1 (``strategy="fsdp1"``) on two real CPU processes, against a plain one-process run; FSDP1 calls on FSDP2.

The job (``_jobs/fsdp1_job.py``) trains as lit-llama's pretraining script does, calls FSDP1's API on the model,
saves and loads, then calls FSDP1's API on a module a second (FSDP2) strategy sharded. Lightning refuses FSDP
without a GPU, so the reference is plain PyTorch in this process: same model, same data, same seed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "_jobs"))
from _common import batches, loss_fn, make_model

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(240)]


def clean(name: str) -> str:
    return name.replace("_fsdp_wrapped_module.", "").replace("_checkpoint_wrapped_module.", "")


def close(found: dict[str, Any], expected: dict[str, torch.Tensor]) -> bool:
    found = {clean(k): torch.tensor(v) for k, v in found.items()}
    return found.keys() == expected.keys() and all(torch.allclose(found[k], expected[k], atol=1e-6) for k in found)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory, run_job: Any, reports: Any) -> list[dict[str, Any]]:
    outdir: Path = tmp_path_factory.mktemp("fsdp1")
    run_job("fsdp1_job.py", outdir, timeout=220)
    found: list[dict[str, Any]] = reports(outdir)
    assert [r["rank"] for r in found] == [0, 1]
    found[0]["outdir"] = outdir
    return found


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    """lit-llama's loop on one process, full batches: the losses and the parameters after it."""
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    losses = []
    for x, y in batches(4):
        loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    after = []
    for x, y in batches(2, seed=11):
        loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)
        optimizer.step()
        optimizer.zero_grad()
        after.append(loss.item())
    return {"losses": losses, "continued": after}


def trained_state() -> dict[str, torch.Tensor]:
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    for x, y in batches(4):
        loss_fn(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.05)
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_the_model_is_wrapped_in_fsdp1_units_and_checkpointed(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["is_fsdp_strategy"] is True  # lit-llama's isinstance(fabric.strategy, FSDPStrategy)
        assert report["forward_module"] == "FullyShardedDataParallel"
        assert report["units"] == 3  # the root and one per Block
        assert report["checkpoint_wrapped"] == 2
        assert report["local_numel"] == 90  # half of 180 parameters: each rank holds its shard


def test_losses_match_a_plain_single_process_run(ranks: list[dict[str, Any]], reference: dict[str, Any]) -> None:
    for report in ranks:
        assert report["losses"] == pytest.approx(reference["losses"], rel=1e-5, abs=1e-6)
    assert reference["losses"][0] != pytest.approx(reference["losses"][-1])  # the model did train


def test_lit_llama_full_state_dict_is_the_unsharded_model_on_rank_0(ranks: list[dict[str, Any]]) -> None:
    expected = trained_state()
    assert close(ranks[0]["full_state_dict"], expected)
    assert ranks[0]["full_state_dict_on_cpu"] is True
    assert ranks[1]["full_state_dict"] == {}  # rank0_only=True
    saved = torch.load(ranks[0]["outdir"] / "lit_llama.pt", weights_only=True)
    assert saved.keys() == expected.keys()
    assert all(torch.allclose(saved[k], expected[k], atol=1e-6) for k in saved)


def test_summon_full_params_gives_whole_parameters_and_reshards(ranks: list[dict[str, Any]]) -> None:
    expected = trained_state()
    for report in ranks:
        assert report["summoned_shapes"] == [[8, 8], [8], [8, 8], [8], [4, 8], [4]]
        assert close(report["summoned"], expected)
    # Outside, each rank's parameters are its flat slice again (rank 0: 36 of weight 0's 64 elements, ...).
    assert ranks[0]["shapes_after_summon"] == [[36], [0], [36], [0], [18], [0]]
    assert ranks[1]["shapes_after_summon"] == [[28], [8], [28], [8], [14], [4]]


@pytest.mark.parametrize("way", ["fabric", "fsdp"])
def test_no_sync_keeps_whole_unreduced_gradients_until_a_synced_backward(ranks: list[dict[str, Any]], way: str) -> None:
    model = make_model()
    (x, y), (x2, y2) = batches(2, seed=7)
    (loss_fn(model(x), y) + loss_fn(model(x2), y2)).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    expected = {k: v.detach() for k, v in model.state_dict().items()}
    for report in ranks:
        assert report[f"{way}_unsynced_grad_shapes"] == [[8, 8], [8], [8, 8], [8], [4, 8], [4]]
        assert report[f"{way}_synced_grad_shapes"] != report[f"{way}_unsynced_grad_shapes"]
        assert close(report[f"{way}_accumulated"], expected)
    # Unreduced: each rank's gradient is of its own half batch.
    assert ranks[0][f"{way}_unsynced_grad"] != pytest.approx(ranks[1][f"{way}_unsynced_grad"])


@pytest.mark.parametrize("kind", ["sharded", "full"])
def test_save_and_load_restore_model_and_metadata(ranks: list[dict[str, Any]], kind: str) -> None:
    for report in ranks:
        assert report[f"{kind}_is_dir"] is (kind == "sharded")
        assert report[f"{kind}_step"] == 4
        assert report[f"{kind}_remainder"] == []
        assert report[f"{kind}_loaded_equal"] is True


def test_training_continues_from_a_sharded_checkpoint_as_without_it(
    ranks: list[dict[str, Any]], reference: dict[str, Any]
) -> None:
    for report in ranks:
        assert report["saved_continued"] == pytest.approx(reference["continued"], rel=1e-5)
        assert report["sharded_continued"] == pytest.approx(report["saved_continued"], rel=1e-6)


@pytest.mark.xfail(strict=True, reason="the optimizer state restored from a full FSDP1 file differs slightly (~1e-4)")
def test_training_continues_from_a_full_checkpoint_as_without_it(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["full_continued"] == pytest.approx(report["saved_continued"], rel=1e-6)


@pytest.mark.parametrize("call", ["state_dict_type", "summon_full_params", "no_sync"])
def test_fsdp1_calls_on_an_fsdp2_module_say_how_to_choose_fsdp1(ranks: list[dict[str, Any]], call: str) -> None:
    for report in ranks:
        kind, message = report[f"fsdp2_{call}"]
        assert kind == "FSDP2ModuleError"
        assert "sharded with FSDP2" in message
        assert "strategy='fsdp1'" in message and "FSDP1Strategy" in message


def test_fsdp1_calls_on_fsdp1_modules_still_work_next_to_fsdp2(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["fsdp1_after_guard"] == 6
