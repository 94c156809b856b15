"""``fabric.save`` / ``fabric.load`` / ``fabric.load_raw``: real files, real round trips."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabric_core.fabric import Fabric
from fabric_core.io.checkpoint_io import CheckpointIO
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.testing import make_manager
from fabric_core.wrappers import FabricModule, FabricOptimizer


def make_fabric(**kwargs: Any) -> Fabric:
    kwargs.setdefault("accelerator", "cpu")
    return Fabric(plugin_manager=make_manager(), **kwargs)


def trained_objects(fabric: Fabric, seed: int = 0) -> tuple[FabricModule, FabricOptimizer, Any]:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)
    model, optimizer, scheduler = fabric.setup(net, sgd, scheduler=scheduler)
    for _ in range(2):
        fabric.backward(model(torch.randn(3, 4)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return model, optimizer, scheduler


def assert_same_tensors(left: Any, right: Any) -> None:
    assert type(left) is type(right)
    if isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            assert_same_tensors(left[key], right[key])
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right)
        for a, b in zip(left, right):
            assert_same_tensors(a, b)
    elif isinstance(left, torch.Tensor):
        assert torch.equal(left, right)
    else:
        assert left == right


def test_round_trip_of_model_optimizer_scheduler_and_plain_values(tmp_path: Path) -> None:
    fabric = make_fabric()
    model, optimizer, scheduler = trained_objects(fabric, seed=0)
    path = tmp_path / "checkpoint.pt"
    fabric.save(path, {"model": model, "optimizer": optimizer, "scheduler": scheduler, "step": 2, "tag": "run"})
    assert path.is_file()

    restored_model, restored_optimizer, restored_scheduler = trained_objects(fabric, seed=1)
    state = {"model": restored_model, "optimizer": restored_optimizer, "scheduler": restored_scheduler, "step": 0}
    remainder = fabric.load(path, state)

    assert remainder == {"tag": "run"}
    assert state["step"] == 2  # plain values are written back into the caller's dict
    assert state["model"] is restored_model  # wrappers stay what the user holds
    assert state["optimizer"] is restored_optimizer
    assert_same_tensors(restored_model.state_dict(), model.state_dict())
    assert_same_tensors(restored_optimizer.state_dict(), optimizer.state_dict())
    assert restored_scheduler.state_dict() == scheduler.state_dict()
    assert restored_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]


def test_saved_keys_have_no_wrapper_prefix(tmp_path: Path) -> None:
    fabric = make_fabric()
    model, optimizer, _ = trained_objects(fabric)
    fabric.save(tmp_path / "c.pt", {"model": model, "optimizer": optimizer})
    checkpoint = torch.load(tmp_path / "c.pt", weights_only=True)
    assert list(checkpoint["model"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert set(checkpoint["optimizer"]) == {"state", "param_groups"}


def test_load_without_state_returns_the_whole_checkpoint(tmp_path: Path) -> None:
    fabric = make_fabric()
    model, _, _ = trained_objects(fabric)
    fabric.save(tmp_path / "c.pt", {"model": model, "epoch": 5})
    checkpoint = fabric.load(tmp_path / "c.pt")
    assert set(checkpoint) == {"model", "epoch"}
    assert checkpoint["epoch"] == 5
    assert_same_tensors(fabric.load(tmp_path / "c.pt", {}), checkpoint)


def test_filter_keeps_only_the_selected_entries(tmp_path: Path) -> None:
    fabric = make_fabric()
    model, optimizer, _ = trained_objects(fabric)
    fabric.save(
        tmp_path / "c.pt",
        {"model": model, "optimizer": optimizer},
        filter={"model": lambda name, value: name.endswith("weight")},
    )
    checkpoint = torch.load(tmp_path / "c.pt", weights_only=True)
    assert list(checkpoint["model"]) == ["0.weight", "2.weight"]
    assert set(checkpoint["optimizer"]) == {"state", "param_groups"}  # unfiltered


def _saved_with_filter(fabric: Any, path: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Linear(2, 2)
    state = {"model": model, "meta": {"step": 3, "epoch": 1}, "empty": {}, "keep": {"a": 1}}
    never: Any = lambda name, value: False  # noqa: E731 - the filter is the subject
    fabric.save(path, state, filter={"model": never, "meta": lambda name, value: name == "step", "empty": never})
    return torch.load(path, weights_only=True)  # type: ignore[no-any-return]


def test_filter_that_keeps_nothing_drops_the_key_as_lightning_does(tmp_path: Path) -> None:
    lightning_fabric = pytest.importorskip("lightning_fabric")
    ours = _saved_with_filter(make_fabric(), tmp_path / "ours.pt")
    theirs = _saved_with_filter(lightning_fabric.Fabric(accelerator="cpu", devices=1), tmp_path / "theirs.pt")
    assert ours == theirs == {"meta": {"step": 3}, "keep": {"a": 1}}


@pytest.mark.parametrize(
    ("filter", "error", "message"),
    [
        ([("model", print)], TypeError, r"Filter should be a dictionary, given \[\('model'"),
        ({"other": print}, ValueError, r"The filter keys \{'other'\} are not present in the state keys \{'model'\}."),
        ({"model": 1}, TypeError, r"Expected `fabric.save\(filter=...\)` for key 'model' to be a callable, given 1"),
    ],
)
def test_filter_errors(tmp_path: Path, filter: Any, error: type[Exception], message: str) -> None:
    fabric = make_fabric()
    with pytest.raises(error, match=message):
        fabric.save(tmp_path / "c.pt", {"model": nn.Linear(2, 2)}, filter=filter)
    assert not (tmp_path / "c.pt").exists()


def test_strict_load_refuses_missing_keys(tmp_path: Path) -> None:
    fabric = make_fabric()
    fabric.save(tmp_path / "c.pt", {"step": 1})
    with pytest.raises(
        KeyError,
        match=r"The requested state contains a key 'epoch' that does not exist in the loaded checkpoint. "
        r"To disable strict loading, set `strict=False`.",
    ):
        fabric.load(tmp_path / "c.pt", {"step": 0, "epoch": 0})
    state = {"step": 0, "epoch": 0}
    assert fabric.load(tmp_path / "c.pt", state, strict=False) == {}
    assert state == {"step": 1, "epoch": 0}


def test_strict_load_refuses_mismatched_module_keys(tmp_path: Path) -> None:
    fabric = make_fabric()
    fabric.save(tmp_path / "c.pt", {"model": nn.Linear(2, 2)})
    other = fabric.setup(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(RuntimeError, match="Missing key"):
        fabric.load(tmp_path / "c.pt", {"model": other})
    fabric.load(tmp_path / "c.pt", {"model": other}, strict=False)


def test_load_unwrapped_objects(tmp_path: Path) -> None:
    fabric = make_fabric()
    source = nn.Linear(2, 2)
    fabric.save(tmp_path / "c.pt", {"model": source})
    target = nn.Linear(2, 2)
    fabric.load(tmp_path / "c.pt", {"model": target})
    assert torch.equal(target.weight, source.weight)


def test_weights_only_is_passed_to_torch_load(tmp_path: Path) -> None:
    fabric = make_fabric()
    fabric.save(tmp_path / "c.pt", {"path": tmp_path})  # a Python object that is not plain data
    with pytest.raises(Exception, match="weights_only"):
        fabric.load(tmp_path / "c.pt")
    assert fabric.load(tmp_path / "c.pt", weights_only=False) == {"path": tmp_path}


@pytest.mark.parametrize("wrapped", [False, True])
def test_load_raw_module(tmp_path: Path, wrapped: bool) -> None:
    fabric = make_fabric()
    source = nn.Linear(2, 2)
    torch.save(source.state_dict(), tmp_path / "raw.pt")
    target: nn.Module = nn.Linear(2, 2)
    if wrapped:
        target = fabric.setup(target)
    assert fabric.load_raw(tmp_path / "raw.pt", target) is None
    assert torch.equal(target.weight, source.weight)


def test_load_raw_module_strictness(tmp_path: Path) -> None:
    fabric = make_fabric()
    torch.save({"weight": torch.zeros(2, 2)}, tmp_path / "raw.pt")
    target = fabric.setup(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="Missing key"):
        fabric.load_raw(tmp_path / "raw.pt", target)
    fabric.load_raw(tmp_path / "raw.pt", target, strict=False)
    assert torch.count_nonzero(target.weight) == 0


@pytest.mark.parametrize("wrapped", [False, True])
def test_load_raw_optimizer(tmp_path: Path, wrapped: bool) -> None:
    fabric = make_fabric()
    _, optimizer, _ = trained_objects(fabric)
    torch.save(optimizer.optimizer.state_dict(), tmp_path / "raw.pt")
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    target: Any = torch.optim.SGD(net.parameters(), lr=1.0, momentum=0.9)
    if wrapped:
        _, target = fabric.setup(net, target)
    fabric.load_raw(tmp_path / "raw.pt", target)
    assert target.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    assert len(target.state) == len(optimizer.state)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        make_fabric().load(tmp_path / "nothing.pt")


requires_proc_maps = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps (Linux)")


def _is_mapped(path: Path) -> bool:
    gc.collect()
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.fixture
def torch_load_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of each ``torch.load`` call (which still runs)."""
    calls: list[dict[str, Any]] = []
    real_load = torch.load

    def recording_load(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    return calls


@requires_proc_maps
def test_load_maps_the_file_for_modules_and_keeps_nothing_mapped(
    tmp_path: Path, torch_load_calls: list[dict[str, Any]]
) -> None:
    fabric = make_fabric()
    model, optimizer, scheduler = trained_objects(fabric, seed=0)
    path = tmp_path / "checkpoint.pt"
    saved = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "ema": torch.arange(5.0)}
    fabric.save(path, {**saved, "extra": {"t": torch.ones(3)}})
    restored_model, restored_optimizer, restored_scheduler = trained_objects(fabric, seed=1)
    state = {"model": restored_model, "optimizer": restored_optimizer, "scheduler": restored_scheduler, "ema": None}
    remainder = fabric.load(path, state)
    assert torch_load_calls[-1].get("mmap") is True
    assert not _is_mapped(path)  # everything kept was copied out of the file's pages
    path.write_bytes(b"")  # a mapping left behind would now fault on access
    assert_same_tensors(restored_model.state_dict(), model.state_dict())
    assert_same_tensors(restored_optimizer.state_dict(), optimizer.state_dict())
    assert restored_scheduler.state_dict() == scheduler.state_dict()
    assert torch.equal(state["ema"], torch.arange(5.0))
    assert torch.equal(remainder["extra"]["t"], torch.ones(3))


class _Assigning(nn.Module):
    """Keeps the loaded tensor itself instead of copying it into its parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(4))

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        self.weight = nn.Parameter(state_dict[prefix + "weight"])


class _WithExtraState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kept: torch.Tensor | None = None

    def get_extra_state(self) -> Any:
        return {"kept": self.kept}

    def set_extra_state(self, state: Any) -> None:
        self.kept = state["kept"]


class _Versioned(nn.Module):
    """Records the version its state dict was saved with (``_metadata``, which loading must keep)."""

    _version = 3

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(2))
        self.loaded_version: int | None = None

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any, *args: Any) -> None:
        self.loaded_version = local_metadata.get("version")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)


@requires_proc_maps
def test_load_copies_what_a_module_would_keep_from_the_file(tmp_path: Path) -> None:
    fabric = make_fabric()
    source = nn.Sequential(_Assigning(), _WithExtraState(), _Versioned())
    source[0].weight.data = torch.arange(4.0)
    source[1].kept = torch.full((3,), 7.0)
    path = tmp_path / "checkpoint.pt"
    fabric.save(path, {"model": source})
    target = nn.Sequential(_Assigning(), _WithExtraState(), _Versioned())
    fabric.load(path, {"model": target})
    assert not _is_mapped(path)
    assert torch.equal(target[0].weight, torch.arange(4.0))
    assert torch.equal(target[1].kept, torch.full((3,), 7.0))
    assert target[2].loaded_version == 3  # the state dict's metadata came through
    raw = tmp_path / "raw.pt"
    torch.save(source.state_dict(), raw)
    again = nn.Sequential(_Assigning(), _WithExtraState(), _Versioned())
    fabric.load_raw(raw, again)  # a module alone is mapped too
    assert not _is_mapped(raw)
    assert torch.equal(again[0].weight, torch.arange(4.0))
    assert torch.equal(again[1].kept, torch.full((3,), 7.0))
    assert again[2].loaded_version == 3


def _momentum(optimizer: Any) -> list[torch.Tensor]:
    return [state["momentum_buffer"] for state in optimizer.optimizer.state.values()]


class _KeepsWhatItLoads(torch.optim.SGD):
    """An optimizer whose own ``load_state_dict`` keeps the state dict it is given."""

    def load_state_dict(self, state_dict: Any) -> None:
        self.kept = state_dict
        super().load_state_dict(state_dict)


@requires_proc_maps
def test_load_copies_the_optimizer_state_into_the_tensors_it_replaces(tmp_path: Path) -> None:
    fabric = make_fabric()
    model, optimizer, _ = trained_objects(fabric, seed=0)
    path = tmp_path / "checkpoint.pt"
    fabric.save(path, {"model": model, "optimizer": optimizer})
    restored_model, restored_optimizer, _ = trained_objects(fabric, seed=1)
    addresses = [tensor.data_ptr() for tensor in _momentum(restored_optimizer)]
    held = _momentum(restored_optimizer)[0]  # a tensor the caller holds is not written into
    held_before = held.clone()
    fabric.load(path, {"model": restored_model, "optimizer": restored_optimizer})
    assert not _is_mapped(path)
    path.write_bytes(b"")  # a mapping left behind would now fault on access
    assert_same_tensors(restored_optimizer.state_dict(), optimizer.state_dict())
    # The loaded values went into the state they replaced (no new memory), but for the tensor held elsewhere.
    after = _momentum(restored_optimizer)
    assert [tensor.data_ptr() for tensor in after[1:]] == addresses[1:]
    assert after[0] is not held and torch.equal(held, held_before)
    assert torch.equal(after[0], _momentum(optimizer)[0])


@requires_proc_maps
@pytest.mark.parametrize("kind", ["fresh", "own_load_state_dict"])
def test_load_into_an_optimizer_without_state_to_replace_keeps_nothing_mapped(tmp_path: Path, kind: str) -> None:
    fabric = make_fabric()
    model, optimizer, _ = trained_objects(fabric, seed=0)
    path = tmp_path / "checkpoint.pt"
    fabric.save(path, {"model": model, "optimizer": optimizer})
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    kind_of = torch.optim.SGD if kind == "fresh" else _KeepsWhatItLoads
    target = kind_of(net.parameters(), lr=1.0, momentum=0.9)
    fabric.load(path, {"model": net, "optimizer": target})
    assert not _is_mapped(path)
    path.write_bytes(b"")
    assert_same_tensors(target.state_dict(), optimizer.state_dict())


@requires_proc_maps
def test_an_optimizer_alone_is_mapped_too(tmp_path: Path, torch_load_calls: list[dict[str, Any]]) -> None:
    fabric = make_fabric()
    _, optimizer, _ = trained_objects(fabric, seed=0)
    raw = tmp_path / "raw.pt"
    torch.save(optimizer.optimizer.state_dict(), raw)
    _, target, _ = trained_objects(fabric, seed=1)
    fabric.load_raw(raw, target)
    assert torch_load_calls[-1]["mmap"] is True
    assert not _is_mapped(raw)
    assert_same_tensors(target.state_dict(), optimizer.state_dict())
    path = tmp_path / "checkpoint.pt"
    fabric.save(path, {"optimizer": optimizer, "step": 3})
    state: dict[str, Any] = {"optimizer": target, "step": 0}
    fabric.load(path, state)
    assert torch_load_calls[-1]["mmap"] is True
    assert not _is_mapped(path)
    assert state["step"] == 3


def test_load_with_weights_only_false_reads_the_file(tmp_path: Path, torch_load_calls: list[dict[str, Any]]) -> None:
    fabric = make_fabric()
    model, _, _ = trained_objects(fabric)
    path = tmp_path / "checkpoint.pt"
    fabric.save(path, {"model": model})
    fabric.load(path, {"model": model}, weights_only=False)  # unpickled objects could hold mapped tensors
    assert "mmap" not in torch_load_calls[-1]
    fabric.load(path, {"model": model})
    assert torch_load_calls[-1]["mmap"] is True
    fabric.load(path)  # no module: everything is returned, read as usual
    assert "mmap" not in torch_load_calls[-1]


class _MappingWithoutSaying(TorchCheckpointIO):
    """Takes ``mmap`` by name but declares it cannot map: it must never be asked to."""

    supports_mmap = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def load_checkpoint(
        self, path: Any, map_location: Any = None, weights_only: bool | None = None, *, mmap: bool = False
    ) -> Any:
        self.calls.append({"mmap": True} if mmap else {})
        return super().load_checkpoint(path, map_location, weights_only, mmap=mmap)


class _DeclaredThroughKwargs(_MappingWithoutSaying):
    """Declares the capability; its ``**kwargs`` signature would hide ``mmap`` from signature sniffing."""

    supports_mmap = True

    def load_checkpoint(
        self, path: Any, map_location: Any = None, weights_only: bool | None = None, **kwargs: Any
    ) -> Any:
        return super().load_checkpoint(path, map_location, weights_only, **kwargs)


def test_mmap_is_asked_of_a_checkpoint_io_by_its_declaration_not_its_signature(
    tmp_path: Path, torch_load_calls: list[dict[str, Any]]
) -> None:
    assert TorchCheckpointIO.supports_mmap and not CheckpointIO.supports_mmap
    path = tmp_path / "checkpoint.pt"
    undeclared = _MappingWithoutSaying()
    fabric = make_fabric(plugins=[undeclared])
    model, _, _ = trained_objects(fabric)
    fabric.save(path, {"model": model})
    fabric.load(path, {"model": model})
    assert undeclared.calls == [{}]  # accepts `mmap`, did not declare it: read as usual
    assert "mmap" not in torch_load_calls[-1]

    declared = _DeclaredThroughKwargs()
    fabric = make_fabric(plugins=[declared])
    model, _, _ = trained_objects(fabric)
    fabric.load(path, {"model": model})
    assert declared.calls == [{"mmap": True}]
    assert torch_load_calls[-1]["mmap"] is True
