"""torch.distributed helpers with Lightning's contracts, built on fabric-core's collectives.

Lightning Fabric's ``utilities.distributed`` has private helpers that real code (lightning.pytorch, LitGPT,
torchmetrics-style code) calls directly: ``_sync_ddp_if_available``, ``_init_dist_connection``, ... They are
served from here under Lightning's names (see :mod:`fabric_core.utilities.distributed`); each is a thin layer
over the one place fabric-core does the same thing (:mod:`fabric_core.strategies._collectives`, the rendezvous,
Fabric's infinite barrier).
"""

from __future__ import annotations

import atexit
import os
import signal
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor

from fabric_core.strategies import _collectives
from fabric_core.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fabric_core.environments.environment import ClusterEnvironment

__all__ = [
    "InfiniteBarrier",
    "all_gather_if_available",
    "default_backend_for_device",
    "destroy_process_group",
    "distributed_is_initialized",
    "gather_all_tensors",
    "group",
    "init_process_group_from_environment",
    "is_dtensor",
    "set_num_threads_if_needed",
    "suggested_max_num_threads",
    "sync",
    "sync_if_available",
]

distributed_is_initialized = _collectives.distributed

if _collectives.DIST_AVAILABLE:
    from torch.distributed import group
else:

    class group:  # type: ignore[no-redef]
        """torch built without distributed support has no process groups: ``group.WORLD`` is ``None`` there."""

        WORLD: Any = None


def gather_all_tensors(result: Tensor, group: Any = None) -> list[Tensor]:
    """Every process's ``result``, as a list indexed by rank, on every process.

    The tensors may differ in the size of every dimension (not in their number): each is padded to the largest
    size for the collective and comes back with its own shape.
    """
    group = dist.group.WORLD if group is None else group
    result = result.contiguous()
    world_size = dist.get_world_size(group)
    dist.barrier(group=group)
    if result.ndim == 0:
        return _simple_gather_all_tensors(result, group, world_size)
    local_size = torch.tensor(result.shape, device=result.device)
    sizes = _simple_gather_all_tensors(local_size, group, world_size)
    largest = torch.stack(sizes).max(dim=0).values
    if all(bool((size == largest).all()) for size in sizes):
        return _simple_gather_all_tensors(result, group, world_size)
    padding: list[int] = []
    for missing in reversed((largest - local_size).tolist()):
        padding += [0, int(missing)]
    padded = _simple_gather_all_tensors(torch.nn.functional.pad(result, padding), group, world_size)
    return [tensor[tuple(slice(int(n)) for n in size)] for tensor, size in zip(padded, sizes)]


def _simple_gather_all_tensors(result: Tensor, group: Any, world_size: int) -> list[Tensor]:
    """``all_gather`` of same-shaped tensors into a list of ``world_size`` tensors."""
    gathered = [torch.zeros_like(result) for _ in range(world_size)]
    dist.all_gather(gathered, result, group)
    return gathered


def sync(result: Tensor, group: Any = None, reduce_op: Any = None) -> Tensor:
    """Reduce ``result`` across the processes in place (``None`` sums; ``"mean"``/``"avg"`` average)."""
    group = dist.group.WORLD if group is None else group
    op, divide = _collectives.resolve_reduce_op("sum" if reduce_op is None else reduce_op)
    dist.barrier(group=group)
    return _collectives.all_reduce(result, group, op, divide)


def sync_if_available(result: Tensor, group: Any = None, reduce_op: Any = None) -> Tensor:
    """:func:`sync` when a process group exists; ``result`` unchanged otherwise."""
    return sync(result, group=group, reduce_op=reduce_op) if distributed_is_initialized() else result


def all_gather_if_available(tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
    """Every process's same-shaped ``tensor`` stacked into ``(world_size, ...)``; ``tensor`` itself alone."""
    if not distributed_is_initialized():
        return tensor
    from torch.distributed.nn.functional import all_gather

    tensor = tensor.contiguous()
    with torch.enable_grad() if sync_grads else torch.no_grad():
        return torch.stack(all_gather(tensor, group if group is not None else dist.group.WORLD))  # type: ignore[no-untyped-call]


def init_process_group_from_environment(
    cluster_environment: ClusterEnvironment,
    torch_distributed_backend: str,
    global_rank: int | None = None,
    world_size: int | None = None,
    **kwargs: Any,
) -> None:
    """Create the default process group from a cluster environment's address, port, rank and world size.

    Nothing happens when a group exists already. ``MASTER_ADDR``/``MASTER_PORT`` are set from the environment,
    as ``torch.distributed`` reads them.

    Raises:
        RuntimeError: This torch build has no ``torch.distributed``.
    """
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available. Cannot initialize distributed process group")
    if dist.is_initialized():
        return
    rank = cluster_environment.global_rank() if global_rank is None else global_rank
    size = cluster_environment.world_size() if world_size is None else world_size
    os.environ["MASTER_ADDR"] = cluster_environment.main_address
    os.environ["MASTER_PORT"] = str(cluster_environment.main_port)
    dist.init_process_group(torch_distributed_backend, rank=rank, world_size=size, **kwargs)
    if torch_distributed_backend == "nccl":
        atexit.register(destroy_process_group)
    rank_zero_info(f"Initialized distributed: backend={torch_distributed_backend}, {size} processes")


def destroy_process_group() -> None:
    """Destroy the default process group, if any, with Ctrl-C ignored meanwhile."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if distributed_is_initialized():
            dist.destroy_process_group()
    finally:
        signal.signal(signal.SIGINT, previous)


def default_backend_for_device(device: torch.device) -> str:
    """The process-group backend torch uses for ``device``'s type (``nccl`` for cuda), else ``gloo``."""
    return dist.Backend.default_device_backend_map.get(device.type, "gloo")


def suggested_max_num_threads(num_processes: int = 1) -> int:
    """The CPU threads each of ``num_processes`` processes on this machine may use (at least 1).

    Raises:
        ValueError: ``num_processes`` < 1.
    """
    if num_processes < 1:
        raise ValueError(f"`num_processes` should be >= 1, got {num_processes}.")
    from fabric_core.utilities.data import _num_cpus_available

    return max(1, _num_cpus_available() // num_processes)


def set_num_threads_if_needed(num_processes: int = 1) -> None:
    """Share the CPUs among ``num_processes`` processes, unless ``OMP_NUM_THREADS`` says how many already."""
    if "OMP_NUM_THREADS" not in os.environ:
        threads = suggested_max_num_threads(num_processes)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


class InfiniteBarrier:
    """A barrier that never times out, on a gloo group of its own (``with InfiniteBarrier() as barrier``).

    Calling it waits for every rank; leaving the block waits once more and releases the group. Without a process
    group it does nothing. Fabric's own ``fabric.barrier`` for long downloads uses the same barrier.
    """

    def __init__(self) -> None:
        self._context: Any = None
        self.barrier: Any = lambda: None

    def __call__(self) -> None:
        self.barrier()

    def __enter__(self) -> InfiniteBarrier:
        from fabric_core._fabric_checks import infinite_barrier

        self._context = infinite_barrier()
        self.barrier = self._context.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        context, self._context = self._context, None
        if context is not None:
            context.__exit__(exc_type, exc, traceback)


def is_dtensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a DTensor; answered without importing DTensor where nothing created one yet."""
    import sys

    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)
