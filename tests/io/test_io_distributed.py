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


# -- consolidation to safetensors: the model's weights as one file or a Hugging Face folder ---------------------


def read_weights(output: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, or of a Hugging Face folder (its index names every shard)."""
    import json

    from safetensors.torch import load_file

    if output.is_file():
        return load_file(output)
    index = output / "model.safetensors.index.json"
    if not index.exists():
        return load_file(output / "model.safetensors")
    weight_map = json.loads(index.read_text())["weight_map"]
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(set(weight_map.values())):
        tensors.update(load_file(output / file))
    assert sorted(tensors) == sorted(weight_map)
    return tensors


def test_consolidate_command_writes_the_model_weights_as_safetensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fabric_core.cli import main

    write_folder(tmp_path / "ckpt", {"step": 7})
    assert main(["consolidate", str(tmp_path / "ckpt"), "--output", str(tmp_path / "whole.pt")]) == 0
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)
    output = tmp_path / "model.safetensors"
    assert main(["consolidate", str(tmp_path / "ckpt"), "--output", str(output)]) == 0
    assert f"wrote {output}" in capsys.readouterr().out
    weights = read_weights(output)
    assert list(weights) == list(whole["model"])  # the model's weights only, in the model's order
    assert all(torch.equal(weights[k], v) and weights[k].dtype == v.dtype for k, v in whole["model"].items())
    # A fresh model takes them as a state dict, strictly.
    fresh = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    fresh.load_state_dict(weights)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_consolidate_command_writes_a_hugging_face_folder_in_shards_read_a_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import fabric_core.io.distributed as distributed
    from fabric_core.cli import main

    model, _ = write_folder(tmp_path / "ckpt", {"step": 7})
    reads: list[int] = []
    original = distributed._Batches._read

    def counted(self: Any, indices: list[int]) -> dict[int, torch.Tensor]:
        reads.append(len(indices))
        return original(self, indices)

    monkeypatch.setattr(distributed, "_BATCH_BYTES", 50)
    monkeypatch.setattr(distributed._Batches, "_read", counted)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # what the user put there is kept
    assert main(["consolidate", str(tmp_path / "ckpt"), "--output", f"{folder}/", "--max-shard-size", "50"]) == 0
    assert reads == [1, 2, 1]  # at most 50 bytes: 0.weight (48 bytes); 0.bias + 2.weight (16 + 32); 2.bias
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == sum(v.numel() * 4 for v in model.state_dict().values())
    assert sorted(set(index["weight_map"].values())) == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert (folder / "config.json").read_text() == "{}"
    weights = read_weights(folder)
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    # One file where the weights fit the default 5GB.
    assert main(["consolidate", str(tmp_path / "ckpt"), "--output", f"{tmp_path / 'one'}/"]) == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["model.safetensors"]
    assert read_weights(tmp_path / "one").keys() == model.state_dict().keys()


def test_the_model_entry_is_the_only_one_or_model_or_the_key_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fabric_core.cli import main

    model, optimizer = trained()
    ema = {k: v + 1 for k, v in model.state_dict().items()}
    dcp_save(
        {"model": model.state_dict(), "ema": ema, "step": torch.tensor(3)}, checkpoint_id=tmp_path / "two", no_dist=True
    )
    dcp_save({"generator": model.state_dict(), "critic": ema}, checkpoint_id=tmp_path / "gan", no_dist=True)
    dcp_save({"optimizer": by_name(model, optimizer)}, checkpoint_id=tmp_path / "none", no_dist=True)

    assert main(["consolidate", str(tmp_path / "two"), "--output", str(tmp_path / "a.safetensors")]) == 0
    assert all(torch.equal(read_weights(tmp_path / "a.safetensors")[k], v) for k, v in model.state_dict().items())
    assert (
        main(["consolidate", str(tmp_path / "two"), "--output", str(tmp_path / "b.safetensors"), "--model-key", "ema"])
        == 0
    )
    assert all(torch.equal(read_weights(tmp_path / "b.safetensors")[k], v) for k, v in ema.items())
    capsys.readouterr()

    assert main(["consolidate", str(tmp_path / "gan"), "--output", str(tmp_path / "c.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "several module state dicts ('generator', 'critic')" in err and "--model-key" in err
    assert (
        main(
            ["consolidate", str(tmp_path / "gan"), "--output", str(tmp_path / "c.safetensors"), "--model-key", "critic"]
        )
        == 0
    )
    assert all(torch.equal(read_weights(tmp_path / "c.safetensors")[k], v) for k, v in ema.items())
    capsys.readouterr()

    for folder, key, phrase in (
        ("gan", "model", "has no entry 'model'; its module state dicts: 'generator', 'critic'"),
        ("two", "step", "has no module state dict under 'step'"),
        ("none", None, "holds no module state dict"),
    ):
        options = [] if key is None else ["--model-key", key]
        assert main(["consolidate", str(tmp_path / folder), "--output", str(tmp_path / "d.safetensors"), *options]) == 2
        assert phrase in capsys.readouterr().err
    assert not (tmp_path / "d.safetensors").exists()


def test_options_for_another_output_are_refused_and_other_suffixes_write_a_torch_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fabric_core.cli import main

    model, _ = write_folder(tmp_path / "ckpt", {"step": 7})
    ckpt = str(tmp_path / "ckpt")
    for output, option, phrase in (
        ("x.pt", ["--model-key", "model"], "`model_key` picks the weights of a safetensors output"),
        ("x.safetensors", ["--max-shard-size", "1GB"], "`max_shard_size` sizes the files of a Hugging Face folder"),
        ("x/", ["--max-shard-size", "big"], "is not a size"),
    ):
        assert main(["consolidate", ckpt, "--output", f"{tmp_path}/{output}", *option]) == 2
        assert phrase in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    # A suffix that is neither `.safetensors` nor `/`: the whole checkpoint as a torch file, as before.
    for name in ("weights.st", "model.safetensors.bak", "plain"):
        assert main(["consolidate", ckpt, "--output", str(tmp_path / name)]) == 0
        whole = torch.load(tmp_path / name, weights_only=True)
        assert sorted(whole) == ["model", "optimizer", "step"]
        assert all(torch.equal(whole["model"][k], v) for k, v in model.state_dict().items())


def test_safetensors_outputs_are_never_overwritten(tmp_path: Path) -> None:
    write_folder(tmp_path / "ckpt")
    (tmp_path / "out.safetensors").write_text("keep me")
    with pytest.raises(InvalidConfigError, match="never overwritten"):
        consolidate(tmp_path / "ckpt", tmp_path / "out.safetensors")
    assert (tmp_path / "out.safetensors").read_text() == "keep me"
    (tmp_path / "file").write_text("keep me")
    with pytest.raises(InvalidConfigError, match="a file is there"):
        consolidate(tmp_path / "ckpt", f"{tmp_path / 'file'}/")
    consolidate(tmp_path / "ckpt", f"{tmp_path / 'hf'}/")
    before = (tmp_path / "hf" / "model.safetensors").read_bytes()
    with pytest.raises(InvalidConfigError, match=r"already holds weights \(model.safetensors\)"):
        consolidate(tmp_path / "ckpt", f"{tmp_path / 'hf'}/")
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == before
    with pytest.raises(CheckpointError, match="not a sharded checkpoint folder"):
        consolidate(tmp_path / "file", tmp_path / "new.safetensors")
    assert not (tmp_path / "new.safetensors").exists()


def test_lightnings_fabric_consolidate_writes_safetensors_by_the_output_suffix(tmp_path: Path) -> None:
    pytest.importorskip("click")
    from click.testing import CliRunner

    from fabric_core import cli

    model, _ = write_folder(tmp_path / "ckpt", {"step": 7})
    runner = CliRunner()
    for output in ("model.safetensors", "hf/", "whole.pt"):
        result = runner.invoke(
            cli._main, ["consolidate", str(tmp_path / "ckpt"), "--output_file", f"{tmp_path}/{output}"]
        )
        assert result.exit_code == 0, result.output
    assert all(torch.equal(read_weights(tmp_path / "model.safetensors")[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(read_weights(tmp_path / "hf")[k], v) for k, v in model.state_dict().items())
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)
    assert sorted(whole) == ["model", "optimizer", "step"]
    # A checkpoint with no module state dict: click's one error line.
    dcp_save({"step": torch.tensor(1)}, checkpoint_id=tmp_path / "bare", no_dist=True)
    result = runner.invoke(
        cli._main, ["consolidate", str(tmp_path / "bare"), "--output_file", str(tmp_path / "b.safetensors")]
    )
    assert result.exit_code == 1 and "holds no module state dict" in result.output
