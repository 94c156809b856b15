"""Sharded checkpoint folders read in one process (core): DCP folders written here without a process group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io.distributed import (
    checkpoint_keys,
    consolidate,
    is_distributed_checkpoint,
    load_distributed_checkpoint,
    optimizer_state_by_name,
    optimizer_state_by_position,
)

# Writing the folders below without a process group is deliberate; torch says so on every save.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def trained() -> tuple[nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    groups: list[dict[str, Any]] = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.5}]
    optimizer = torch.optim.Adam(groups)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def by_name(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    names = [n for n, _ in model.named_parameters()]
    named: dict[str, Any] = optimizer_state_by_name(optimizer.state_dict(), names)
    return named


def write_folder(folder: Path, extras: dict[str, Any] | None = None) -> tuple[nn.Sequential, torch.optim.Optimizer]:
    model, optimizer = trained()
    dcp_save({"model": model.state_dict(), "optimizer": by_name(model, optimizer)}, checkpoint_id=folder, no_dist=True)
    if extras is not None:
        torch.save(extras, folder / "meta.pt")
    return model, optimizer


def test_optimizer_state_round_trips_between_positions_and_names() -> None:
    model, optimizer = trained()
    named = by_name(model, optimizer)
    assert list(named["state"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert named["param_groups"][1]["params"] == ["2.weight", "2.bias"]
    assert named["param_groups"][1]["lr"] == 0.5
    back = optimizer_state_by_position(named)
    original = optimizer.state_dict()
    assert back["param_groups"] == original["param_groups"]
    for index, state in original["state"].items():
        assert all(torch.equal(back["state"][index][k], v) for k, v in state.items())


def test_conversions_leave_states_already_in_their_form_alone() -> None:
    model, optimizer = trained()
    positional = optimizer.state_dict()
    assert optimizer_state_by_position(positional) is positional
    named = by_name(model, optimizer)
    assert optimizer_state_by_name(named, ["x"]) is named


def test_a_different_number_of_parameters_is_a_checkpoint_error() -> None:
    _, optimizer = trained()
    with pytest.raises(CheckpointError, match="covers 4 parameters but the optimizer being restored has 3"):
        optimizer_state_by_name(optimizer.state_dict(), ["a", "b", "c"])


def test_a_folder_loads_as_plain_state_dicts_with_meta_merged(tmp_path: Path) -> None:
    model, optimizer = write_folder(tmp_path / "ckpt", {"step": 7, "note": "hi"})
    loaded = load_distributed_checkpoint(tmp_path / "ckpt")
    assert sorted(loaded) == ["model", "note", "optimizer", "step"]
    assert (loaded["step"], loaded["note"]) == (7, "hi")
    fresh = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    fresh.load_state_dict(loaded["model"])
    assert all(torch.equal(p, q) for p, q in zip(fresh.parameters(), model.parameters()))
    groups: list[dict[str, Any]] = [{"params": fresh[0].parameters()}, {"params": fresh[2].parameters()}]
    restored = torch.optim.Adam(groups)
    restored.load_state_dict(loaded["optimizer"])
    assert restored.param_groups[1]["lr"] == 0.5
    head, trained_head = fresh[2], model[2]
    assert isinstance(head, nn.Linear) and isinstance(trained_head, nn.Linear)
    assert torch.equal(restored.state[head.bias]["exp_avg_sq"], optimizer.state[trained_head.bias]["exp_avg_sq"])


def test_a_folder_without_meta_loads_too(tmp_path: Path) -> None:
    write_folder(tmp_path / "ckpt")
    assert sorted(load_distributed_checkpoint(tmp_path / "ckpt")) == ["model", "optimizer"]


def test_top_level_keys_come_from_the_metadata_even_with_dots(tmp_path: Path) -> None:
    dcp_save({"a.b": {"w": torch.ones(2)}, "c": torch.zeros(1)}, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    assert checkpoint_keys(tmp_path / "ckpt") == {"a.b", "c"}


def test_what_is_not_a_sharded_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_distributed_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"no '\.metadata' file"):
        load_distributed_checkpoint(tmp_path / "empty")
    torch.save({}, tmp_path / "file.pt")
    assert not is_distributed_checkpoint(tmp_path / "file.pt")
    with pytest.raises(CheckpointError, match="not a sharded checkpoint folder"):
        consolidate(tmp_path / "file.pt", tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_consolidate_writes_one_torch_load_able_file(tmp_path: Path) -> None:
    model, _ = write_folder(tmp_path / "ckpt", {"step": 7})
    output = consolidate(tmp_path / "ckpt")
    assert output == tmp_path / "ckpt.consolidated"
    merged = torch.load(output, weights_only=True)
    assert merged["step"] == 7
    assert all(torch.equal(merged["model"][k], v) for k, v in model.state_dict().items())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_consolidate_never_overwrites(tmp_path: Path) -> None:
    write_folder(tmp_path / "ckpt")
    (tmp_path / "out.pt").write_text("keep me")
    with pytest.raises(InvalidConfigError, match="never overwritten"):
        consolidate(tmp_path / "ckpt", tmp_path / "out.pt")
    assert (tmp_path / "out.pt").read_text() == "keep me"


def test_the_core_checkpoint_io_reads_a_sharded_folder_whole(tmp_path: Path) -> None:
    from fabric_core.io.torch_io import TorchCheckpointIO

    model, _ = trained()
    folder = tmp_path / "ckpt"
    dcp_save({"model": model.state_dict()}, checkpoint_id=folder)
    torch.save({"epoch": 3}, folder / "meta.pt")
    loaded = TorchCheckpointIO().load_checkpoint(folder)
    assert loaded["epoch"] == 3
    for key, value in model.state_dict().items():
        assert torch.equal(loaded["model"][key], value)


def test_consolidate_command_writes_once_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fabric_core.cli import main

    model, optimizer = trained()
    folder = tmp_path / "ckpt"
    dcp_save({"model": model.state_dict(), "optimizer": by_name(model, optimizer)}, checkpoint_id=folder)
    torch.save({"step": 7}, folder / "meta.pt")
    assert main(["consolidate", str(folder)]) == 0
    output = tmp_path / "ckpt.consolidated"
    assert f"wrote {output}" in capsys.readouterr().out
    loaded = torch.load(output, weights_only=True)
    assert loaded["step"] == 7
    fresh = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    fresh.load_state_dict(loaded["model"])
    assert all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters()))
    assert main(["consolidate", str(folder)]) == 2
    assert "never overwritten" in capsys.readouterr().err
    assert main(["consolidate", str(tmp_path / "missing")]) == 2
