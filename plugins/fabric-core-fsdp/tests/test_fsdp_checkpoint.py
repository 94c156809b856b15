"""FSDP checkpoints written by two real processes: loaded back by two, by one, and consolidated into one file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabric_core.errors import InvalidConfigError
from fabric_core_fsdp import consolidate, load_distributed_checkpoint

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, run_job: Any) -> Path:
    outdir: Path = tmp_path_factory.mktemp("fsdp-checkpoint")
    run_job("fsdp_checkpoint_job.py", "cpu", outdir)
    return outdir


@pytest.fixture(scope="module")
def ranks(saved: Path, reports: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = reports(saved)
    return found


def make_model() -> nn.Sequential:
    # The job's model (``_jobs/_common.py``), rebuilt here for loading in this process.
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.linear(x))

    return nn.Sequential(Block(), Block(), nn.Linear(8, 4))


def test_sharded_save_writes_one_shard_file_per_rank_and_meta(ranks: list[dict[str, Any]]) -> None:
    assert ranks[0]["sharded_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]


def test_sharded_saves_replace_the_folder_and_sweep_what_killed_saves_left(ranks: list[dict[str, Any]]) -> None:
    # The job planted a dead writer's temp folder of `sharded`; saving over folders and files left nothing hidden.
    for report in ranks:
        assert report["swapped_is_file"] is True
        assert report["swapped_is_folder"] is True
        assert report["hidden_after_saves"] == []


def test_sharded_load_restores_parameters_optimizer_state_and_extras(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["sharded_load_equal"] is True
        assert report["sharded_load_lr"] == 0.01
        assert report["sharded_load_step"] == 2
        assert report["sharded_remainder"] == {"tag": "fsdp"}


def test_full_file_loads_into_a_model_created_on_the_meta_device(ranks: list[dict[str, Any]]) -> None:
    for report in ranks:
        assert report["empty_init"] == {"meta_before_setup": True, "meta_after_setup": False, "local_numel": 90}
        assert report["full_load_equal"] is True
        assert report["full_remainder"] == {"step": 2, "tag": "fsdp"}
        assert report["equal_after_another_step"] is True


def test_load_raw_reads_a_plain_state_dict_file_into_the_shards(ranks: list[dict[str, Any]]) -> None:
    assert [report["load_raw_equal"] for report in ranks] == [True, True]


def test_filter_with_a_sharded_checkpoint_is_a_clear_error(ranks: list[dict[str, Any]]) -> None:
    message = ranks[1]["filter_error"]
    assert message is not None and "state_dict_type='full'" in message


def test_strict_load_names_the_missing_key(ranks: list[dict[str, Any]]) -> None:
    assert "'missing'" in ranks[0]["strict_error"]


def test_sharded_checkpoint_loads_into_one_process(saved: Path, run_job: Any, tmp_path: Path) -> None:
    run_job("fsdp_load_job.py", saved, tmp_path)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result == {
        "world_size": 1,
        "step": 2,
        "model_equal": True,
        "optimizer_equal": True,
        "whole_keys": ["model", "optimizer", "step", "tag"],
        "whole_model_equal": True,
    }


def test_consolidated_file_matches_the_full_checkpoint(saved: Path, tmp_path: Path) -> None:
    output = consolidate(saved / "sharded", tmp_path / "one.pt")
    assert output == tmp_path / "one.pt"
    merged = torch.load(output, weights_only=True)
    full = torch.load(saved / "full.pt", weights_only=True)
    assert sorted(merged) == sorted(full) == ["model", "optimizer", "step", "tag"]
    assert (merged["step"], merged["tag"]) == (2, "fsdp")
    assert list(merged["model"]) == list(full["model"])
    for name, tensor in full["model"].items():
        assert torch.equal(merged["model"][name], tensor), name
    assert merged["optimizer"]["param_groups"] == full["optimizer"]["param_groups"]
    assert list(merged["optimizer"]["state"]) == list(range(6))
    for index, state in full["optimizer"]["state"].items():
        for key, value in state.items():
            assert torch.equal(merged["optimizer"]["state"][index][key], value), (index, key)


def test_consolidated_file_loads_into_a_plain_model_and_optimizer(saved: Path, tmp_path: Path) -> None:
    merged = torch.load(consolidate(saved / "sharded", tmp_path / "one.pt"), weights_only=True)
    model = make_model()
    model.load_state_dict(merged["model"])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.5)
    optimizer.load_state_dict(merged["optimizer"])
    assert optimizer.param_groups[0]["lr"] == 0.01
    head = model[2]
    assert isinstance(head, nn.Linear)
    assert torch.equal(optimizer.state[head.weight]["exp_avg"], merged["optimizer"]["state"][4]["exp_avg"])


def test_the_command_writes_the_model_weights_as_safetensors_equal_to_the_torch_consolidation(
    saved: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    from fabric_core.cli import main

    whole = torch.load(consolidate(saved / "sharded", tmp_path / "one.pt"), weights_only=True)["model"]
    assert main(["consolidate", str(saved / "sharded"), "--output", str(tmp_path / "model.safetensors")]) == 0
    assert main(["consolidate", str(saved / "sharded"), "--output", f"{tmp_path}/hf/", "--max-shard-size", "400"]) == 0
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    in_folder: dict[str, torch.Tensor] = {}
    for file in sorted(set(index["weight_map"].values())):
        in_folder.update(load_file(tmp_path / "hf" / file))
    assert len(set(index["weight_map"].values())) > 1
    for weights in (load_file(tmp_path / "model.safetensors"), in_folder):
        assert sorted(weights) == sorted(whole)
        for name, tensor in whole.items():
            assert torch.equal(weights[name], tensor), name
    model = make_model()
    model.load_state_dict(in_folder)  # strict: the model's own names, every one


def test_consolidate_defaults_next_to_the_folder_and_never_overwrites(saved: Path) -> None:
    output = consolidate(saved / "sharded")
    assert output == saved / "sharded.consolidated"
    before = output.read_bytes()
    with pytest.raises(InvalidConfigError, match="already exists"):
        consolidate(saved / "sharded")
    assert output.read_bytes() == before
    output.unlink()


def test_a_single_process_without_fsdp_reads_the_sharded_folder(saved: Path) -> None:
    loaded = load_distributed_checkpoint(saved / "sharded")
    model = make_model()
    model.load_state_dict(loaded["model"])  # strict: every key, plain tensors
    assert (loaded["step"], loaded["tag"]) == (2, "fsdp")


def test_ranks_that_opened_different_checkpoints_start_over_and_load_the_same_one(
    run_job: Any, reports: Any, tmp_path: Path
) -> None:
    # Rank 0 holds version 1, rank 1 opened version 2 swapped in meanwhile. Kept whole, each alone would read one
    # complete folder, so only comparing the save ids of the ranks catches it; deleted, rank 0's reads fail.
    run_job("fsdp_replace_job.py", tmp_path, timeout=120)
    loaded_version_2 = {"version": 2, "values": [2.0], "opens": 2}
    assert reports(tmp_path) == [{"kept": loaded_version_2, "deleted": loaded_version_2}] * 2
