"""FSDPStrategy, ModelParallelStrategy and FSDPPrecision against Lightning's: the same calls, the same errors.

Each test makes the same call on Lightning Fabric 2.6's class and on ours and compares the exception types
and the key phrase of the messages. One process and no process group: the checks both make before any
collective. Checks that need set-up (sharded) models run on two processes in ``_jobs/model_parallel_job.py``
(``test_model_parallel.py``). Skipped without ``lightning_fabric`` (the ``compat`` test extra).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel

from fabric_core.accelerators.cpu import CPUAccelerator
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import Precision
from fabric_core_fsdp import FSDPPrecision, FSDPStrategy, ModelParallelStrategy
from fabric_core_fsdp.model_parallel import build_device_mesh

lightning_strategies = pytest.importorskip("lightning_fabric.strategies")
lightning_model_parallel = pytest.importorskip("lightning_fabric.strategies.model_parallel")
lightning_precision = pytest.importorskip("lightning_fabric.plugins.precision.fsdp")


def identity(model: nn.Module, mesh: Any) -> nn.Module:
    return model


def raised(call: Callable[[], Any]) -> BaseException:
    """The exception ``call`` raises (the test fails if it returns)."""
    with pytest.raises(BaseException) as info:
        call()
    return info.value


def both(theirs: Callable[[], Any], ours: Callable[[], Any], kind: type[BaseException], phrase: str) -> BaseException:
    """Both calls raise ``kind`` with ``phrase`` in the message; return ours."""
    errors = raised(theirs), raised(ours)
    for error in errors:
        assert isinstance(error, kind), repr(error)
        assert phrase in str(error), str(error)
    return errors[1]


# (Lightning's class, ours, the word Lightning's errors name the model with), for both sharded strategies.
STRATEGIES = {
    "model_parallel": (
        lambda **kw: lightning_strategies.ModelParallelStrategy(parallelize_fn=identity, **kw),
        lambda **kw: ModelParallelStrategy(identity, **kw),
        "distributed",
    ),
    "fsdp": (lightning_strategies.FSDPStrategy, FSDPStrategy, "FSDP"),
}
EACH = pytest.mark.parametrize("name", sorted(STRATEGIES))


def _full(name: str) -> dict[str, Any]:
    return {"save_distributed_checkpoint": False} if name == "model_parallel" else {"state_dict_type": "full"}


@EACH
@pytest.mark.parametrize("state", [{}, {"model": "plain", "step": 3}])
def test_saving_needs_a_sharded_model(name: str, state: dict[str, Any], tmp_path: Path) -> None:
    theirs, ours, word = STRATEGIES[name]
    state = {key: nn.Linear(3, 3) if value == "plain" else value for key, value in state.items()}
    error = both(
        lambda: theirs().save_checkpoint(tmp_path / "ckpt", state),
        lambda: ours().save_checkpoint(tmp_path / "ckpt", state),
        ValueError,
        f"Could not find a {word} model in the provided checkpoint state.",
    )
    assert isinstance(error, InvalidConfigError)
    assert not (tmp_path / "ckpt").exists()


@EACH
def test_a_full_checkpoint_does_not_replace_a_folder(name: str, tmp_path: Path) -> None:
    theirs, ours, _ = STRATEGIES[name]
    folder = tmp_path / "not-a-checkpoint"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    both(
        lambda: theirs(**_full(name)).save_checkpoint(folder, {"model": nn.Linear(2, 2)}),
        lambda: ours(**_full(name)).save_checkpoint(folder, {"model": nn.Linear(2, 2)}),
        IsADirectoryError,
        f"The checkpoint path exists and is a directory: {folder}",
    )
    assert (folder / "notes.txt").read_text() == "keep me"


@EACH
def test_storage_options_are_refused(name: str, tmp_path: Path) -> None:
    theirs, ours, _ = STRATEGIES[name]
    cls = "ModelParallelStrategy" if name == "model_parallel" else "FSDPStrategy"
    both(
        lambda: theirs().save_checkpoint(tmp_path, {}, storage_options=Mock()),
        lambda: ours().save_checkpoint(tmp_path, {}, storage_options=Mock()),
        TypeError,
        f"`{cls}.save_checkpoint(..., storage_options=...)` is not supported",
    )


@EACH
def test_a_filter_is_refused_for_sharded_checkpoints(name: str, tmp_path: Path) -> None:
    theirs, ours, _ = STRATEGIES[name]
    error = both(
        lambda: theirs().save_checkpoint(tmp_path, {}, filter={"model": lambda k, v: True}),
        lambda: ours().save_checkpoint(tmp_path, {}, filter={"model": lambda k, v: True}),
        NotImplementedError,
        "filtered checkpoints, so saving them is disabled",
    )
    assert isinstance(error, InvalidConfigError)


def test_the_device_mesh_exists_once_the_processes_run() -> None:
    theirs, ours, _ = STRATEGIES["model_parallel"]
    both(
        lambda: theirs().device_mesh,
        lambda: ours().device_mesh,
        RuntimeError,
        "Accessing the device mesh before processes have initialized is not allowed",
    )


@pytest.mark.parametrize(("data_parallel", "tensor_parallel", "world"), [(1, 1, 4), (2, 3, 4), (4, 2, 4), (2, 1, 8)])
def test_mesh_sizes_must_multiply_to_the_world_size(data_parallel: int, tensor_parallel: int, world: int) -> None:
    cpu = torch.device("cpu")
    both(
        lambda: lightning_model_parallel._setup_device_mesh(data_parallel, tensor_parallel, world, cpu),
        lambda: build_device_mesh(data_parallel, tensor_parallel, world, cpu),
        RuntimeError,
        "multiplied should equal the world size",
    )
    # The strategy checks its sizes before it joins a process group (Lightning's test mocks that step out).
    strategy = ModelParallelStrategy(identity, data_parallel_size=data_parallel, tensor_parallel_size=tensor_parallel)
    nodes = world // 4
    strategy.connect(
        accelerator=CPUAccelerator(),
        precision=Precision(),
        checkpoint_io=None,
        cluster_environment=LightningEnvironment(),
        parallel_devices=[cpu] * 4,
        num_nodes=nodes,
    )
    with pytest.raises(RuntimeError, match="multiplied should equal the world size"):
        strategy.setup_environment()


def test_model_parallel_refuses_fsdp1_modules() -> None:
    # A real FSDP1 unit needs a process group; the check only asks what class a submodule is.
    unit = FullyShardedDataParallel.__new__(FullyShardedDataParallel)
    nn.Module.__init__(unit)
    model = nn.Sequential(nn.Linear(2, 2), unit)
    theirs, ours, _ = STRATEGIES["model_parallel"]
    error = both(
        lambda: theirs().setup_module(model),
        lambda: ours().setup_module(model),
        TypeError,
        "Found modules that are wrapped with `torch.distributed.fsdp.FullyShardedDataParallel`. The "
        "`ModelParallelStrategy` only supports the new FSDP2 APIs",
    )
    assert isinstance(error, InvalidConfigError)


def test_an_unsupported_precision_names_the_supported_ones() -> None:
    error = both(
        lambda: lightning_precision.FSDPPrecision(precision="64-true"),
        lambda: FSDPPrecision(precision="64-true"),
        ValueError,
        "is not supported in FSDP. `precision` must be one of",
    )
    assert "'bf16-mixed'" in str(error)


def test_a_scaler_needs_16_mixed() -> None:
    both(
        lambda: lightning_precision.FSDPPrecision(precision="bf16-mixed", scaler=Mock()),
        lambda: FSDPPrecision(precision="bf16-mixed", scaler=Mock()),
        ValueError,
        "`precision='bf16-mixed'` does not use a scaler",
    )
    assert lightning_precision.FSDPPrecision(precision="bf16-mixed").scaler is None
    assert FSDPPrecision(precision="bf16-mixed").scaler is None


@EACH
@pytest.mark.parametrize("state", [None, {}])
def test_loading_no_state_from_a_folder_that_is_no_checkpoint_names_the_call(
    name: str, state: dict[str, Any] | None, tmp_path: Path
) -> None:
    theirs, ours, _ = STRATEGIES[name]
    cls = "ModelParallelStrategy" if name == "model_parallel" else "FSDPStrategy"
    both(
        lambda: theirs().load_checkpoint(tmp_path, state=state),
        lambda: ours().load_checkpoint(tmp_path, state=state),
        ValueError,
        f"Got {cls}.load_checkpoint(..., state={state!r})",
    )
    # What stays ours: without a state, a full checkpoint file is returned whole (Lightning refuses the call).
    torch.save({"step": 7, "model": {"weight": torch.ones(2)}}, tmp_path / "full.pt")
    loaded = ours().load_checkpoint(tmp_path / "full.pt", state=state)
    assert loaded["step"] == 7 and torch.equal(loaded["model"]["weight"], torch.ones(2))


@EACH
def test_a_lone_optimizer_is_not_loaded_from_a_folder(name: str, tmp_path: Path) -> None:
    theirs, ours, _ = STRATEGIES[name]
    optimizer = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    error = both(
        lambda: theirs().load_checkpoint(tmp_path, state=optimizer),
        lambda: ours().load_checkpoint(tmp_path, state=optimizer),
        NotImplementedError,
        "Loading a single optimizer object from a checkpoint is not supported",
    )
    assert isinstance(error, InvalidConfigError)


def test_parallelize_fn_must_return_a_module() -> None:
    theirs_cls, ours_cls = lightning_strategies.ModelParallelStrategy, ModelParallelStrategy
    theirs, ours = theirs_cls(parallelize_fn=lambda m, mesh: None), ours_cls(lambda m, mesh: None)
    theirs._device_mesh = ours._device_mesh = Mock()  # the mesh exists once the processes run
    both(
        lambda: theirs.setup_module(nn.Linear(2, 2)),
        lambda: ours.setup_module(nn.Linear(2, 2)),
        TypeError,
        "The `parallelize_fn` must return a `nn.Module` instance, but got: NoneType",
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_16_mixed_scales_with_a_sharded_grad_scaler(device: str) -> None:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    theirs = lightning_precision.FSDPPrecision(precision="16-mixed").scaler
    ours = FSDPPrecision(precision="16-mixed", device=device).scaler
    assert isinstance(theirs, ShardedGradScaler) and isinstance(ours, ShardedGradScaler)
    assert ours._device == device  # the scaler's device is the precision's (Lightning's is always CUDA)
