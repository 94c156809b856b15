"""DDPStrategy and DataParallelStrategy without processes: options, launchers, state dicts, single-process DP."""

from __future__ import annotations

import contextlib
import pickle
from typing import Any
from unittest.mock import Mock

import pytest
import torch

from fabric_core.accelerators.cpu import CPUAccelerator
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.errors import InvalidConfigError
from fabric_core.launchers.multiprocessing import MultiProcessingLauncher
from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher
from fabric_core.precision.precision import Precision
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core_ddp.ddp import DDPStrategy
from fabric_core_ddp.dp import DataParallelStrategy

CPU = torch.device("cpu")


def connect(strategy: DDPStrategy | DataParallelStrategy, devices: int = 2) -> None:
    strategy.connect(
        accelerator=CPUAccelerator(),
        precision=Precision(),
        checkpoint_io=None,
        cluster_environment=LightningEnvironment(),
        parallel_devices=[CPU] * devices,
        num_nodes=1,
    )


def test_unknown_start_method_lists_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match=r"'thread'.*'popen', 'spawn', 'fork', 'forkserver'"):
        DDPStrategy(start_method="thread")


@pytest.mark.parametrize("reserved", ["device_ids", "output_device"])
def test_device_options_are_reserved_for_the_strategy(reserved: str) -> None:
    with pytest.raises(InvalidConfigError, match=f"`{reserved}`.*Fabric\\(devices=...\\)"):
        options: dict[str, Any] = {reserved: [0]}
        DDPStrategy(**options)


def test_popen_uses_the_subprocess_script_launcher() -> None:
    strategy = DDPStrategy()
    connect(strategy)
    launcher = strategy.launcher
    assert isinstance(launcher, SubprocessScriptLauncher)
    assert (launcher.num_processes, launcher.num_nodes) == (2, 1)
    assert launcher.cluster_environment is strategy.cluster_environment


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_multiprocessing_start_methods(start_method: str) -> None:
    strategy = DDPStrategy(start_method=start_method)
    connect(strategy)
    assert isinstance(strategy.launcher, MultiProcessingLauncher)
    assert strategy.launcher.start_method == start_method
    assert strategy.launcher.strategy is strategy


def test_ddp_options_are_kept() -> None:
    strategy = DDPStrategy(static_graph=True, gradient_as_bucket_view=True)
    assert strategy.ddp_kwargs == {"static_graph": True, "gradient_as_bucket_view": True}


def test_backward_sync_control_needs_a_ddp_module() -> None:
    control = DDPStrategy().backward_sync_control
    assert control is not None
    with control.no_backward_sync(torch.nn.Linear(1, 1), enabled=False):
        pass
    with pytest.raises(TypeError, match=r"DistributedDataParallel.*Linear"):
        control.no_backward_sync(torch.nn.Linear(1, 1), enabled=True)


def test_strategy_pickles_for_spawn() -> None:
    strategy = DDPStrategy(start_method="spawn", static_graph=True)
    connect(strategy)
    copy = pickle.loads(pickle.dumps(strategy))
    assert copy.ddp_kwargs == {"static_graph": True}
    assert copy.launcher.strategy is copy
    assert copy.world_size == 2


def test_dp_is_one_process_with_identity_collectives() -> None:
    strategy = DataParallelStrategy()
    connect(strategy, devices=2)
    assert strategy.single_process
    assert strategy.launcher is None
    assert (strategy.global_rank, strategy.world_size, strategy.root_device) == (0, 1, CPU)
    assert strategy.distributed_sampler_kwargs is None
    tensor = torch.ones(2)
    assert strategy.all_reduce(tensor) is tensor
    assert strategy.all_gather(tensor) is tensor
    assert strategy.broadcast("x") == "x"
    assert strategy.reduce_boolean_decision(False) is False
    strategy.setup_environment()
    assert not torch.distributed.is_initialized()


def test_dp_is_a_parallel_strategy_that_declares_one_process_instead_of_undoing_the_parallel_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Lightning's DataParallelStrategy is a ParallelStrategy, so `isinstance(strategy, ParallelStrategy)` in user
    # code must hold; its single process comes from `single_process`, not from overriding the ranks, the
    # device, the sampler, the process group and the collectives back one by one.
    assert issubclass(DataParallelStrategy, ParallelStrategy)
    own = {name for name in vars(DataParallelStrategy) if not name.startswith("_")}
    assert own <= {"single_process", "setup_module", "get_module_state_dict", "load_module_state_dict", "all_reduce"}
    # The ranks of a job that placed this process elsewhere do not apply to the one process that drives all devices.
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("NODE_RANK", "1")
    strategy = DataParallelStrategy()
    connect(strategy, devices=3)
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size) == (0, 0, 0, 1)
    assert strategy.root_device == CPU and strategy.num_processes == 3
    assert strategy.distributed_sampler_kwargs is None and strategy.is_global_zero


def test_dp_wraps_in_data_parallel_and_saves_clean_keys() -> None:
    strategy = DataParallelStrategy()
    connect(strategy)
    module = torch.nn.Linear(2, 1)
    wrapped = strategy.setup_module(module)
    assert isinstance(wrapped, torch.nn.DataParallel)
    assert torch.equal(wrapped(torch.ones(1, 2)), module(torch.ones(1, 2)))  # no GPU: runs the module directly
    state = strategy.get_module_state_dict(wrapped)
    assert sorted(state) == ["bias", "weight"]
    strategy.load_module_state_dict(wrapped, {k: torch.zeros_like(v) for k, v in state.items()})
    assert module.weight.abs().sum() == 0


def test_process_group_backend_is_none_until_the_group_exists_as_in_lightning() -> None:
    lightning_ddp = pytest.importorskip("lightning_fabric.strategies.ddp")
    ours, theirs = DDPStrategy(), lightning_ddp.DDPStrategy()
    connect(ours)
    assert ours.process_group_backend is None
    assert theirs.process_group_backend is None
    assert DDPStrategy(process_group_backend="mpi").process_group_backend == "mpi"


def test_lightnings_keyword_and_extra_arguments_of_the_collectives() -> None:
    # Lightning names DataParallelStrategy.all_reduce's first parameter `collection`, and its barriers take
    # and ignore extra arguments.
    tensor = torch.ones(2)
    assert DataParallelStrategy().all_reduce(collection=tensor) is tensor
    assert DataParallelStrategy().barrier("checkpoint", 1, timeout=5) is None
    assert DDPStrategy().barrier("checkpoint", 1, timeout=5) is None


@pytest.mark.parametrize("device", [torch.device("cpu"), torch.device("cuda", 0)], ids=["cpu", "cuda"])
def test_on_a_gpu_the_wrapper_is_built_on_a_side_stream_as_in_lightning(
    device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    lightning_ddp = pytest.importorskip("lightning_fabric.strategies.ddp")
    import fabric_core_ddp.ddp as ours

    entered: list[str] = []
    for name, module, cls in (("lightning", lightning_ddp, lightning_ddp.DDPStrategy), ("ours", ours, DDPStrategy)):
        # Mocks stand in for the GPU this machine lacks: the stream, and the wrapper that would need NCCL.
        stream = Mock(side_effect=lambda _, name=name: entered.append(name) or contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "Stream", Mock())
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(module, "DistributedDataParallel", Mock())
        cls(parallel_devices=[device], cluster_environment=LightningEnvironment()).setup_module(torch.nn.Linear(2, 2))
    assert entered == ([] if device.type == "cpu" else ["lightning", "ours"])


def test_data_parallel_passes_device_indices_given_as_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's strategies/test_dp.py::test_data_parallel_setup_module.

    import fabric_core_ddp.dp as dp

    wrapper = Mock()
    monkeypatch.setattr(dp, "DataParallel", wrapper)
    strategy = dp.DataParallelStrategy()
    strategy.parallel_devices = [0, 2, 1]
    module = torch.nn.Linear(2, 2)
    strategy.setup_module(module)
    wrapper.assert_called_once_with(module=module, device_ids=[0, 2, 1])
