"""torch.distributed helpers with Lightning's contracts, built on fabric-core's collectives.

Lightning Fabric's ``utilities.distributed`` has private helpers that real code (lightning.pytorch, LitGPT,
torchmetrics-style code) calls directly: ``_sync_ddp_if_available``, ``_gather_all_tensors``, ... Those built
on the collectives are served from here under Lightning's names (see :mod:`fabric_core.utilities.distributed`,
which holds the others); each is a thin layer over the one place fabric-core does the same thing
(:mod:`fabric_core._distributed.collectives`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from fabric_core._distributed import collectives
from fabric_core.utilities.distributed import _is_dtensor, _suggested_max_num_threads

__all__ = [
    "all_gather_if_available",
    "default_backend_for_device",
    "distributed_is_initialized",
    "gather_all_tensors",
    "group",
    "is_dtensor",
    "suggested_max_num_threads",
    "sync",
    "sync_if_available",
]

distributed_is_initialized = collectives.distributed
default_backend_for_device = collectives.default_backend_for_device
#: The threads per process (``fabric-core run`` reads it); the helper lives at Lightning's path.
suggested_max_num_threads = _suggested_max_num_threads

if collectives.DIST_AVAILABLE:
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
    op, divide = collectives.resolve_reduce_op("sum" if reduce_op is None else reduce_op)
    dist.barrier(group=group)
    return collectives.all_reduce(result, group, op, divide)


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


#: Whether a tensor is a DTensor (the helper lives at Lightning's path).
is_dtensor = _is_dtensor
