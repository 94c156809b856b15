"""ParallelStrategy without processes: ranks, devices, backend, and the single-process fallbacks."""

from __future__ import annotations

import os

import pytest
import torch

from fabric_core._distributed.collectives import REDUCE_OP_NAMES, resolve_reduce_op
from fabric_core.accelerators.cpu import CPUAccelerator
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import Precision
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.utilities.rank_zero import rank_zero_only

CPU = torch.device("cpu")


def connected(devices: int = 2, num_nodes: int = 1, **kwargs: object) -> ParallelStrategy:
    strategy = ParallelStrategy(**kwargs)  # type: ignore[arg-type]
    strategy.connect(
        accelerator=CPUAccelerator(),
        precision=Precision(),
        checkpoint_io=None,
        cluster_environment=LightningEnvironment(),
        parallel_devices=[CPU] * devices,
        num_nodes=num_nodes,
    )
    return strategy


def test_is_not_single_process() -> None:
    assert ParallelStrategy.single_process is False


def test_world_size_and_ranks_on_the_first_process() -> None:
    strategy = connected(devices=2)
    assert (strategy.num_processes, strategy.world_size) == (2, 2)
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank) == (0, 0, 0)
    assert strategy.is_global_zero


def test_global_rank_counts_nodes_before_local_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("NODE_RANK", "1")
    strategy = connected(devices=2, num_nodes=3)
    assert strategy.world_size == 6
    assert strategy.global_rank == 3
    assert strategy.cluster_environment is not None
    assert strategy.cluster_environment.global_rank() == 3
    assert not strategy.is_global_zero


def test_ranks_are_announced_to_rank_zero_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    connected(devices=2)
    assert rank_zero_only.rank == 1


def test_root_device_is_the_local_ranks_device(monkeypatch: pytest.MonkeyPatch) -> None:
    devices = [torch.device("cpu", 0), torch.device("cpu", 1)]
    strategy = ParallelStrategy(parallel_devices=devices)
    strategy.connect(
        accelerator=CPUAccelerator(),
        precision=Precision(),
        checkpoint_io=None,
        cluster_environment=LightningEnvironment(),
        parallel_devices=[CPU] * 2,
        num_nodes=1,
    )
    assert strategy.parallel_devices == devices  # the constructor's devices win over selection's
    assert strategy.root_device == devices[0]
    monkeypatch.setenv("LOCAL_RANK", "1")  # what a launcher sets in the process of local rank 1 ...
    strategy.set_world_ranks()  # ... before the ranks are recorded there
    assert strategy.root_device == devices[1]


def test_root_device_without_devices_names_the_fix() -> None:
    with pytest.raises(RuntimeError, match="parallel_devices"):
        _ = ParallelStrategy().root_device


def test_connect_keeps_a_cluster_environment_given_to_the_constructor() -> None:
    mine = LightningEnvironment()
    strategy = connected(cluster_environment=mine)
    assert strategy.cluster_environment is mine


def test_backend_defaults_to_the_accelerators() -> None:
    assert connected()._get_process_group_backend() == "gloo"
    assert connected(process_group_backend="mpi")._get_process_group_backend() == "mpi"


def test_backend_is_unknown_until_the_group_is_created() -> None:
    assert connected().process_group_backend is None
    assert connected(process_group_backend="mpi").process_group_backend == "mpi"


def test_sampler_kwargs_shard_by_global_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert connected(devices=2, num_nodes=2).distributed_sampler_kwargs == {"num_replicas": 4, "rank": 1}


def test_collectives_without_a_process_group_are_the_identity() -> None:
    strategy = connected()
    tensor = torch.tensor([1.0, 2.0])
    assert strategy.all_reduce(tensor) is tensor
    assert strategy.all_gather(tensor) is tensor
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.reduce_boolean_decision(False) is False
    strategy.barrier("nothing to wait for")


def test_unknown_reduce_op_lists_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match=r"'median'.*Valid choices: 'mean', 'avg', 'sum'") as info:
        connected().all_reduce(torch.ones(1), reduce_op="median")
    assert info.value.argument == "reduce_op"


@pytest.mark.parametrize("name", REDUCE_OP_NAMES)
def test_every_documented_reduce_op_name_resolves(name: str) -> None:
    op, divide = resolve_reduce_op(name.upper())
    assert divide is (name in ("mean", "avg"))
    assert op is not None


def test_avg_reduce_op_is_a_sum_then_a_division() -> None:
    op, divide = resolve_reduce_op(torch.distributed.ReduceOp.AVG)
    assert (op, divide) == (torch.distributed.ReduceOp.SUM, True)


def test_teardown_without_a_process_group_clears_the_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    strategy = connected()
    strategy.teardown()
    assert "WORLD_SIZE" not in os.environ


def test_barrier_and_all_reduce_take_and_ignore_lightnings_extra_arguments() -> None:
    # Lightning's strategies declare `barrier(*args, **kwargs)` and `SingleDeviceStrategy.all_reduce(tensor,
    # *args, **kwargs)`; code written against them passes extras that must not raise.
    from fabric_core.strategies.single_device import SingleDeviceStrategy

    assert connected().barrier("checkpoint", 1, timeout=5) is None
    single = SingleDeviceStrategy(device=CPU)
    assert single.barrier("checkpoint", 1, timeout=5) is None
    tensor = torch.ones(2)
    assert single.all_reduce(tensor, None, "sum", async_op=False) is tensor
    assert single.all_reduce(tensor=tensor) is tensor


@pytest.mark.parametrize(("device", "backend"), [("cuda:0", "nccl"), ("cpu", "gloo")])
def test_without_an_accelerator_the_backend_is_torchs_default_for_the_device(device: str, backend: str) -> None:
    # Lightning's test_ddp_process_group_backend: a subclass sets `_root_device` before the constructor runs.
    class OnDevice(ParallelStrategy):
        def __init__(self, root_device: torch.device) -> None:
            self._root_device = root_device
            super().__init__()

        @property
        def root_device(self) -> torch.device:
            return self._root_device

    strategy = OnDevice(torch.device(device))
    assert strategy.accelerator is None
    assert strategy._get_process_group_backend() == backend
    assert ParallelStrategy()._get_process_group_backend() == "gloo"  # no devices either
