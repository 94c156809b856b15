"""Sharded checkpoint folders with real payloads, and with missing or truncated shards, read in one process.

Every payload is a pickle that runs ``touch MARKER`` when unpickled without restrictions; each test asserts
that the marker never appears unless the caller passed ``weights_only=False``.
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from fabric_core import Fabric
from fabric_core.errors import CheckpointError
from fabric_core.io.distributed import (
    checkpoint_keys,
    consolidate,
    load_distributed_checkpoint,
    optimizer_state_by_name,
)
from fabric_core.testing.payloads import Payload, executions, plant_in_metadata, plant_in_shard

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A legitimate folder: a model and its Adam state (two param groups) by DCP, ``{"step": 3}`` in meta.pt."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    groups: list[dict[str, Any]] = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.5}]
    optimizer = torch.optim.Adam(groups)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    names = [n for n, _ in model.named_parameters()]
    state = {"model": model.state_dict(), "optimizer": optimizer_state_by_name(optimizer.state_dict(), names)}
    dcp_save(state, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    torch.save({"step": 3}, tmp_path / "ckpt" / "meta.pt")
    return tmp_path / "ckpt"


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PWNED"


def refused(call: Any, file: str, what: str) -> CheckpointError:
    # A pickle.UnpicklingError too, as Lightning's torch.load raises there, so `except` written for it works.
    with pytest.raises(pickle.UnpicklingError) as info:
        call()
    assert isinstance(info.value, CheckpointError) and info.value.reason == "unsafe"
    assert info.value.path is not None and info.value.path.endswith(file)
    assert file in str(info.value) and what in str(info.value)
    assert "weights_only=False" in str(info.value)
    return info.value


def test_a_payload_in_metadata_is_refused_everywhere_the_folder_is_read(folder: Path, marker: Path) -> None:
    plant_in_metadata(folder, marker)
    refused(lambda: load_distributed_checkpoint(folder), ".metadata", "posix.system")
    refused(lambda: checkpoint_keys(folder), ".metadata", "posix.system")
    refused(lambda: consolidate(folder, folder.with_name("out.pt")), ".metadata", "posix.system")
    refused(lambda: Fabric(accelerator="cpu", devices=1).load(folder), ".metadata", "posix.system")
    assert executions(marker) == 0
    assert not folder.with_name("out.pt").exists()
    # The payload is live: a caller who trusts the folder gets it run (and the checkpoint still loads).
    loaded = load_distributed_checkpoint(folder, weights_only=False)
    assert executions(marker) == 1
    assert loaded["step"] == 3


def test_a_payload_in_a_shard_is_refused(folder: Path, marker: Path) -> None:
    shard = plant_in_shard(folder, "optimizer.param_groups.1.lr", marker)
    error = refused(lambda: load_distributed_checkpoint(folder), shard, "optimizer.param_groups.1.lr")
    assert "os.system" in str(error) or "posix.system" in str(error)
    refused(lambda: Fabric(accelerator="cpu", devices=1).load(folder), shard, "param_groups")
    assert executions(marker) == 0
    load_distributed_checkpoint(folder, weights_only=False)
    assert executions(marker) == 1


def test_a_payload_in_meta_pt_is_refused(folder: Path, marker: Path) -> None:
    torch.save({"step": Payload(marker)}, folder / "meta.pt")
    refused(lambda: load_distributed_checkpoint(folder), "meta.pt", "system")
    assert executions(marker) == 0


@pytest.mark.slow
def test_consolidate_cli_refuses_a_payload_and_names_the_file(folder: Path, marker: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    shutil.copytree(folder, clean)
    plant_in_metadata(folder, marker)
    command = [sys.executable, "-m", "fabric_core", "consolidate"]
    result = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert ".metadata" in result.stderr and "posix.system" in result.stderr
    assert "Traceback" not in result.stderr
    assert executions(marker) == 0
    assert not folder.with_name("ckpt.consolidated").exists()
    # A legitimate folder still consolidates, and a trusted one with --no-weights-only.
    ok = subprocess.run([*command, str(clean)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert torch.load(tmp_path / "clean.consolidated", weights_only=True)["step"] == 3
    trusted = subprocess.run([*command, "--no-weights-only", str(folder)], capture_output=True, text=True, timeout=120)
    assert trusted.returncode == 0, trusted.stderr
    assert executions(marker) == 1


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_missing_or_truncated_shard_is_a_checkpoint_error_naming_it(folder: Path, damage: str) -> None:
    shard = folder / "__0_0.distcp"
    if damage == "delete":
        shard.unlink()
    else:
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    fabric = Fabric(accelerator="cpu", devices=1)
    for load in (lambda: load_distributed_checkpoint(folder), lambda: fabric.load(folder)):
        try:
            load()
        except Exception as err:  # the point: DCP's BaseException no longer escapes this
            assert isinstance(err, CheckpointError)
            assert err.reason == "corrupt" and err.path == str(shard)
            assert "__0_0.distcp" in str(err)
            assert ("does not exist" if damage == "delete" else "bytes, but the metadata") in str(err)
        else:
            pytest.fail("loading a damaged folder succeeded")


def test_a_truncated_metadata_is_a_checkpoint_error(folder: Path) -> None:
    metadata = folder / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])
    with pytest.raises(CheckpointError, match=r"\.metadata") as info:
        load_distributed_checkpoint(folder)
    assert info.value.reason == "corrupt"


@pytest.mark.parametrize("library", ["lightning_fabric", "fabric_core"])
def test_torchs_escape_hatch_variables_mean_what_they_mean_to_torch_and_lightning(
    library: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fabric_module = pytest.importorskip(library)
    marker = tmp_path / f"RAN-{library}"
    torch.save({"step": 3, "payload": Payload(marker)}, tmp_path / "ckpt.pt")
    fabric = fabric_module.Fabric(accelerator="cpu", devices=1)
    with pytest.raises(pickle.UnpicklingError):  # the default refuses it
        fabric.load(tmp_path / "ckpt.pt")
    assert executions(marker) == 0

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # the user lifts the default on purpose
    with pytest.warns(UserWarning, match="TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD detected"):
        assert fabric.load(tmp_path / "ckpt.pt")["step"] == 3
    assert executions(marker) == 1
    with pytest.raises(pickle.UnpicklingError):  # an explicit weights_only=True still wins over it
        fabric.load(tmp_path / "ckpt.pt", weights_only=True)

    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")  # forces safe loads, even weights_only=False
    with pytest.raises(pickle.UnpicklingError):
        fabric.load(tmp_path / "ckpt.pt", weights_only=False)
    assert executions(marker) == 1


@pytest.mark.parametrize("weights_only", [None, True])
def test_a_lazy_load_refuses_a_payload_unless_told_the_file_is_trusted(
    tmp_path: Path, marker: Path, weights_only: bool | None
) -> None:
    # `None` is what `fabric.load` now hands on when the caller passed nothing: it must mean safe here too.
    from fabric_core.errors import UnsafeCheckpointError
    from fabric_core.io.lazy_load import lazy_load

    torch.save({"w": torch.ones(2), "payload": Payload(marker)}, tmp_path / "f.pt")
    with pytest.raises(UnsafeCheckpointError, match="Nothing in it was run"):
        lazy_load(tmp_path / "f.pt", weights_only=weights_only)
    assert executions(marker) == 0
    assert torch.sum(lazy_load(tmp_path / "f.pt", weights_only=False)["w"]) == 2
    assert executions(marker) == 1
