"""Accelerate's operations: collectives over nested batches, plus the structure helpers.

Every collective runs on ``torch.distributed`` once a process group is initialised and is the identity
(or a clone, for ``reduce``) in a single process, so the same code runs unchanged on one device and on
many. Each rank must pass a structure of the same shape; a leaf that is not a tensor is a ``TypeError``.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Final

import torch
import torch.distributed as dist
from torch import Tensor

from fabric_core._distributed import collectives
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities import _OPERATIONS
from fabric_core.utilities._active import get_active_strategy
from fabric_core.utilities.rank_zero import rank_zero_warn

# Accelerate exports the structure helpers with the collectives: every name of structures.__all__.
from fabric_core.utilities.structures import *  # noqa: F403
from fabric_core.utilities.structures import _map_tensors

__all__ = list(_OPERATIONS)

_distributed: Final = collectives.distributed  # whether a process group exists (one definition, there)
# ``all_gather_into_tensor`` was renamed in torch 2.13 (the old name warns); both fill one flat buffer.
_all_gather_flat: Final[Callable[..., Any]] = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCTIONS: Final = {
    "mean": "SUM",
    "sum": "SUM",
    "none": "SUM",  # Accelerate's spelling of a sum that is not divided
    "max": "MAX",
    "min": "MIN",
    "product": "PRODUCT",
}
_RNG_TYPES: Final = ("torch", "cuda", "mps", "xpu", "generator")


def _world_size() -> int:
    return dist.get_world_size() if _distributed() else 1


def _check_rank(argument: str, rank: int, operation: str) -> None:
    world_size = _world_size()
    if not 0 <= rank < world_size:
        raise InvalidConfigError(
            f"`{operation}({argument}={rank!r})` is not a rank of this run: valid ranks are 0 to {world_size - 1}.",
            argument=argument,
            value=rank,
        )


# -- gather ----------------------------------------------------------------------------------------------
def gather(tensor: Any, dst: int | None = None) -> Any:
    """Concatenate every process's tensors along dimension 0, for each tensor in a nested structure.

    0-d tensors count as shape ``[1]``. The first dimension may differ between processes: each tensor is
    padded to the largest, gathered, and trimmed again, so the result holds exactly the rows sent, in
    rank order. Other dimensions and the dtype must match on every process (else a ``ValueError`` on all).

    Args:
        tensor: A tensor or a nested list/tuple/dict of tensors.
        dst: ``None`` returns the result on every process; a rank returns it on that rank only and
            ``None`` on the others.

    Returns:
        The gathered structure (``None`` on ranks other than ``dst``).

    Raises:
        TypeError: A leaf is not a tensor.
        ValueError: Shapes beyond dimension 0, or dtypes, differ between processes.
    """
    if dst is not None:
        _check_rank("dst", dst, "gather")
    if not _distributed():
        return _map_tensors(tensor, _at_least_1d, "gather")
    if dst is not None and dist.get_rank() != dst:
        _map_tensors(tensor, lambda t: _gather_one(t, dst), "gather")
        return None
    return _map_tensors(tensor, lambda t: _gather_one(t, dst), "gather")


def _at_least_1d(tensor: Tensor) -> Tensor:
    return tensor.reshape(1) if tensor.dim() == 0 else tensor


def _gather_one(tensor: Tensor, dst: int | None) -> Tensor | None:
    tensor = _at_least_1d(tensor).contiguous()
    world_size, rank = dist.get_world_size(), dist.get_rank()
    rows = _exchange_layout(tensor, world_size)
    sizes = [row[0] for row in rows]
    if any(row[1:] != rows[0][1:] for row in rows):
        raise ValueError(
            f"`gather` needs the same trailing shape and dtype on every process, but they differ: this "
            f"process (rank {rank}) has shape {tuple(tensor.shape)} and dtype {tensor.dtype}. Only the first "
            "dimension may vary between processes."
        )
    largest = max(sizes)
    if tensor.shape[0] < largest:
        padded = tensor.new_zeros((largest, *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        tensor = padded
    buffer = tensor.new_empty((world_size * largest, *tensor.shape[1:])) if dst in (None, rank) else None
    if largest == 0:
        return buffer  # every rank sent nothing: nothing to exchange, and gloo dislikes empty messages
    if dst is None:
        _all_gather_flat(buffer, tensor)
    else:
        chunks = list(buffer.view(world_size, *tensor.shape).unbind(0)) if buffer is not None else None
        dist.gather(tensor, gather_list=chunks, dst=dst)
    if buffer is None or all(size == largest for size in sizes):
        return buffer
    per_rank = buffer.view(world_size, *tensor.shape)
    return torch.cat([per_rank[i, :size] for i, size in enumerate(sizes)])


def _exchange_layout(tensor: Tensor, world_size: int) -> list[list[int]]:
    # One small collective tells every rank every rank's first dimension, plus fingerprints of what must
    # agree (number of dimensions, the others, dtype): mismatches become an error instead of a hang.
    trailing = zlib.crc32(repr(tuple(tensor.shape[1:])).encode())
    dtype = zlib.crc32(str(tensor.dtype).encode())
    layout = torch.tensor([tensor.shape[0], tensor.dim(), trailing, dtype], dtype=torch.int64, device=tensor.device)
    layouts = layout.new_empty(world_size * 4)
    _all_gather_flat(layouts, layout)
    values: list[int] = layouts.tolist()
    return [values[i : i + 4] for i in range(0, len(values), 4)]


def gather_object(obj: Any) -> list[Any]:
    """Gather a picklable object from every process into one list, in rank order.

    A list or tuple contributes its items (flattened one level, as Accelerate does); anything else
    contributes itself. In one process this is ``list(obj)`` (or ``[obj]``), so results look alike.
    """
    if not _distributed():
        return list(obj) if isinstance(obj, (list, tuple)) else [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    flat: list[Any] = []
    for item in gathered:
        if isinstance(item, (list, tuple)):
            flat.extend(item)
        else:
            flat.append(item)
    return flat


# -- broadcast, reduce, pad ------------------------------------------------------------------------------
def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Overwrite every tensor of a nested structure, in place, with process ``from_process``'s.

    Raises:
        TypeError: A leaf is not a tensor.
    """
    _check_rank("from_process", from_process, "broadcast")
    if not _distributed():
        return _map_tensors(tensor, lambda t: t, "broadcast")

    def one(t: Tensor) -> Tensor:
        dist.broadcast(t, src=from_process)
        return t

    return _map_tensors(tensor, one, "broadcast")


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Replace, in place, the items of ``object_list`` with those of process ``from_process``; return it."""
    _check_rank("from_process", from_process, "broadcast_object_list")
    if _distributed():
        dist.broadcast_object_list(object_list, src=from_process)
    return object_list


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Reduce every tensor of a nested structure across processes; the inputs are left untouched.

    Args:
        tensor: A tensor or a nested list/tuple/dict of tensors.
        reduction: ``"mean"``, ``"sum"``, ``"max"``, ``"min"``, ``"product"``, or ``"none"`` (a sum).
            The mean of integer tensors is floating point.
        scale: Multiplies the result.

    Raises:
        InvalidConfigError: Unknown ``reduction``.
        TypeError: A leaf is not a tensor.
    """
    op_name = _REDUCTIONS.get(reduction.lower()) if isinstance(reduction, str) else None
    if op_name is None:
        raise InvalidConfigError(
            f"`reduce(reduction={reduction!r})` is not supported. Valid choices: {', '.join(_REDUCTIONS)}.",
            argument="reduction",
            value=reduction,
        )
    distributed = _distributed()
    world_size = dist.get_world_size() if distributed else 1
    mean = reduction.lower() == "mean"

    def one(t: Tensor) -> Tensor:
        result = t.clone()
        if distributed:
            if (result.shape, result.dtype, None) not in collectives.AGREED:
                collectives.agree_on_signature(result, None)
            dist.all_reduce(result, op=getattr(dist.ReduceOp, op_name))
        if mean and (world_size > 1 or not (result.is_floating_point() or result.is_complex())):
            result = result / world_size
        return result * scale if scale != 1.0 else result

    return _map_tensors(tensor, one, "reduce")


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Pad every tensor along ``dim`` to the largest size any process has there.

    Tensors that have no dimension ``dim`` (on every process alike) are returned as they are, as are
    nested tensors (with a warning).

    Args:
        tensor: A tensor or a nested list/tuple/dict of tensors.
        dim: The dimension to pad.
        pad_index: The fill value.
        pad_first: Pad at the front instead of the end.

    Raises:
        TypeError: A leaf is not a tensor.
    """
    if not _distributed():
        return _map_tensors(tensor, lambda t: t, "pad_across_processes")
    world_size = dist.get_world_size()

    def one(t: Tensor) -> Tensor:
        if t.is_nested:
            rank_zero_warn("`pad_across_processes` cannot pad nested tensors; they are returned unpadded.")
            return t
        if not -t.dim() <= dim < t.dim():
            return t
        size = torch.tensor([t.shape[dim]], dtype=torch.int64, device=t.device)
        sizes = size.new_empty(world_size)
        _all_gather_flat(sizes, size)
        largest = int(sizes.max())
        if t.shape[dim] == largest:
            return t
        shape = list(t.shape)
        shape[dim] = largest
        padded = t.new_full(shape, pad_index)
        start = largest - t.shape[dim] if pad_first else 0
        padded.narrow(dim, start, t.shape[dim]).copy_(t)
        return padded

    return _map_tensors(tensor, one, "pad_across_processes")


# -- synchronisation -------------------------------------------------------------------------------------
def wait_for_everyone() -> None:
    """Block until every process has reached this call (nothing to wait for in one process)."""
    if not _distributed():
        return
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def synchronize_rng_state(rng_type: Any, generator: torch.Generator | None = None) -> None:
    """Give every process the state of process 0's random number generator of ``rng_type``.

    Args:
        rng_type: ``"torch"`` (CPU), ``"cuda"``, ``"mps"``, ``"xpu"`` (the current device's generator) or
            ``"generator"`` (the one passed); an enum whose ``value`` is one of these works too.
        generator: The generator to synchronise, for ``"generator"``.

    Raises:
        InvalidConfigError: Unknown ``rng_type``, or ``"generator"`` without a generator.
    """
    name = str(getattr(rng_type, "value", rng_type)).lower()
    if name not in _RNG_TYPES:
        raise InvalidConfigError(
            f"`synchronize_rng_state(rng_type={rng_type!r})` is not supported. Valid choices: {', '.join(_RNG_TYPES)}.",
            argument="rng_type",
            value=rng_type,
        )
    if name == "generator" and generator is None:
        raise InvalidConfigError(
            "`synchronize_rng_state('generator')` needs the generator: pass `generator=`.",
            argument="generator",
            value=None,
        )
    if not _distributed():
        return
    get_state, set_state = _rng_accessors(name, generator)
    state = get_state()
    on_gpu = dist.get_backend() == "nccl"
    shared = state.to(torch.device("cuda", torch.cuda.current_device())) if on_gpu else state
    dist.broadcast(shared, src=0)
    set_state(shared.cpu() if on_gpu else shared)


def synchronize_rng_states(rng_types: Iterable[Any], generator: torch.Generator | None = None) -> None:
    """:func:`synchronize_rng_state` for each of ``rng_types``."""
    for rng_type in rng_types:
        synchronize_rng_state(rng_type, generator)


def _rng_accessors(
    name: str, generator: torch.Generator | None
) -> tuple[Callable[[], Tensor], Callable[[Tensor], Any]]:
    if name == "generator":
        assert generator is not None
        return generator.get_state, generator.set_state
    if name == "torch":
        return torch.get_rng_state, torch.set_rng_state
    backend = getattr(torch, name)
    return backend.get_rng_state, backend.set_rng_state


# -- sharded parameters ----------------------------------------------------------------------------------
class GatheredParameters:
    """Context in which sharded parameters are whole, as DeepSpeed's ``GatheredParameters`` is.

    Delegates to ``gathered_parameters`` of the strategy of the Fabric built last (strategies that do
    not shard have nothing to do); without a Fabric, or with ``enabled=False``, it does nothing.

    Args:
        params: A parameter or an iterable of parameters.
        modifier_rank: The rank whose changes inside the block are kept (``None``: read only).
        enabled: ``False`` makes the context do nothing.
    """

    def __init__(
        self, params: Tensor | Iterable[Tensor], modifier_rank: int | None = None, enabled: bool = True
    ) -> None:
        self.params: Sequence[Tensor] = [params] if isinstance(params, Tensor) else list(params)
        self.modifier_rank = modifier_rank
        self.enabled = enabled
        self._context: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> Any:
        strategy = get_active_strategy() if self.enabled else None
        if strategy is None:
            self._context = contextlib.nullcontext()
        else:
            self._context = strategy.gathered_parameters(self.params, self.modifier_rank)
        return self._context.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        context, self._context = self._context, None
        assert context is not None, "GatheredParameters was exited without being entered"
        return context.__exit__(exc_type, exc, traceback)
