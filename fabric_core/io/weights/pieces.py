"""What one rank holds of each weight of a module: a whole tensor, or its block of a ``DTensor``.

A :class:`Piece` names a weight under the module's own names (:func:`canonical`: without the prefixes that
wrappers add), its whole shape and dtype, and the block this rank holds: where it starts and its shape.
Saving writes each block at its place in the file; loading reads each block's bytes straight into the
rank's tensor. A ``DTensor`` sharded with ``Shard`` and ``Replicate`` placements is cut into its blocks
here, whatever strategy made it (FSDP2, tensor parallelism, both); a plain tensor is one block that
global rank 0 writes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeGuard

import torch
from torch import Tensor
from torch.nn import Module

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

__all__ = ["Piece", "canonical", "load_targets", "persistent_targets", "save_sources"]

#: The names wrappers put in front of (or inside) a module's own names: DDP and Fabric's wrapper, FSDP1,
#: activation checkpointing, ``torch.compile``.
_WRAPPER_PARTS: Final = re.compile(
    r"(?:^|(?<=\.))(?:_forward_module|_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\."
)
_LEADING_MODULE: Final = re.compile(r"^(?:module\.)+")


def canonical(name: str) -> str:
    """``name`` without wrapper prefixes: ``_forward_module.``, ``module.`` (leading), ``_orig_mod.``, FSDP's."""
    return _LEADING_MODULE.sub("", _WRAPPER_PARTS.sub("", name))


@dataclass
class Piece:
    """A weight and the block of it that this rank holds.

    Attributes:
        name: The weight's name, :func:`canonical`.
        dtype: The whole tensor's dtype.
        shape: The whole tensor's shape.
        offsets: Where this rank's block starts, per dimension.
        block: The block's shape.
        fetch: Returns the block's data on a rank that writes it (saves), ``None`` elsewhere; every rank calls
            it, in the same order (a strategy may gather inside).
        tensor: The rank's own tensor holding the block (loads write into it); ``None`` where it has none.
        rows: Where ``tensor`` holds rows that are not next to each other: per dimension, the rows it holds
            (the block is then the whole tensor, which a load reads and indexes).
    """

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offsets: tuple[int, ...]
    block: tuple[int, ...]
    fetch: Callable[[], Tensor | None] = field(repr=False, default=lambda: None)
    tensor: Tensor | None = field(repr=False, default=None)
    rows: list[Tensor] | None = field(repr=False, default=None)


def _is_dtensor(value: Any) -> TypeGuard[DTensor]:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def _local_index(value: DTensor) -> list[Tensor] | None:
    """Per dimension, the global indices of the rows this rank's local tensor holds.

    FSDP2 over tensor parallelism shards one dimension twice (``_StridedShard`` then ``Shard``), which may hold
    rows that are not next to each other; torch's own arithmetic (what DCP uses) says which. ``None`` for
    placements other than shards and replicas.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._utils import _get_shard_size_and_offsets
    from torch.distributed.tensor.placement_types import _StridedShard

    placements = value.placements
    if not all(isinstance(p, (Shard, _StridedShard, Replicate)) for p in placements):
        return None
    mesh, coordinate = value.device_mesh, value.device_mesh.get_coordinate()
    shape = list(value.shape)
    index = [torch.arange(size) for size in shape]
    if coordinate is None:  # outside the mesh: holds nothing
        return [torch.arange(0) for _ in shape]
    for mesh_dim, placement in enumerate(placements):
        if not isinstance(placement, (Shard, _StridedShard)):
            continue
        dim = placement.dim
        size, chosen = _get_shard_size_and_offsets(
            len(index[dim]), mesh.size(mesh_dim), coordinate[mesh_dim], placement, index[dim], shape[dim], False
        )
        index[dim] = chosen if size and chosen is not None else torch.arange(0)
    return index


def _box(index: list[Tensor] | None) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(offsets, block shape)`` where the rows of :func:`_local_index` make one block of the whole; ``None``
    otherwise (other placements, or rows apart)."""
    if index is None or not all(_contiguous(rows) for rows in index):
        return None
    return tuple(int(rows[0]) if len(rows) else 0 for rows in index), tuple(len(rows) for rows in index)


def _first_holder(value: DTensor) -> bool:
    """Whether this rank holds its block first: the replicas of a block write nothing."""
    from torch.distributed.tensor import Replicate

    coordinate = value.device_mesh.get_coordinate()
    return coordinate is not None and all(
        coordinate[d] == 0 for d, p in enumerate(value.placements) if isinstance(p, Replicate)
    )


def _contiguous(rows: Tensor) -> bool:
    return len(rows) == 0 or bool(torch.equal(rows, torch.arange(int(rows[0]), int(rows[0]) + len(rows))))


def _key(tensor: Tensor) -> tuple[Any, ...] | None:
    """What makes two entries the same tensor (tied weights): storage, offset, shape, strides, dtype."""
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return None
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tensor.stride(),
        tensor.dtype,
    )


def save_sources(state_dict: dict[str, Any], is_global_zero: bool, whole: bool = False) -> list[Piece]:
    """The pieces of ``state_dict`` for a save: every weight once (a tied weight under its first name).

    A DTensor's block is written by its first holder (ranks that hold the same block as a replica write
    nothing); a DTensor of other placements, or any DTensor with ``whole``, is gathered whole (collectively,
    one tensor at a time) and written by rank 0; a plain tensor is written by rank 0.
    """
    pieces: list[Piece] = []
    seen: set[tuple[Any, ...]] = set()
    for name, value in state_dict.items():
        if not isinstance(value, Tensor):
            continue
        local = value.to_local() if _is_dtensor(value) else value
        key = _key(local)
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        shape = tuple(value.shape)
        box: tuple[tuple[int, ...], tuple[int, ...]] = ((0,) * len(shape), shape)
        if not _is_dtensor(value):
            fetch = _constant(value if is_global_zero else None)
        elif not whole and (own := _box(_local_index(value))) is not None:
            fetch, box = _constant(local if _first_holder(value) else None), own
        else:
            fetch = _gathered(value, is_global_zero)
        pieces.append(Piece(canonical(name), value.dtype, shape, *box, fetch))
    return pieces


def _constant(tensor: Tensor | None) -> Callable[[], Tensor | None]:
    return lambda: tensor


def _gathered(value: Any, keep: bool) -> Callable[[], Tensor | None]:
    def fetch() -> Tensor | None:
        full = value.full_tensor()  # collective: every rank calls it
        return full if keep else None

    return fetch


def load_targets(module: Module) -> list[Piece]:
    """The pieces of ``module``'s state (parameters and persistent buffers) that a load writes into.

    Each piece's ``tensor`` is the rank's own storage: the parameter's data, or a DTensor's local block.
    Tied weights appear under each of their names, sharing one tensor.
    """
    pieces = []
    for name, value in module.state_dict(keep_vars=True).items():
        if not isinstance(value, Tensor):
            continue
        shape, whole = tuple(value.shape), ((0,) * value.dim(), tuple(value.shape))
        if not _is_dtensor(value):
            pieces.append(Piece(canonical(name), value.dtype, shape, *whole, tensor=value.detach()))
            continue
        index = _local_index(value)
        if index is None:
            raise NotImplementedError(
                f"Loading safetensors into {name!r} needs its DTensor placements to be shards or replicas "
                f"(got {value.placements})."
            )
        local = value.to_local().detach()
        box = _box(index)
        if box is not None:
            pieces.append(Piece(canonical(name), value.dtype, shape, *box, tensor=local))
        else:  # rows apart: the load reads the whole tensor and keeps this rank's rows
            pieces.append(Piece(canonical(name), value.dtype, shape, *whole, tensor=local, rows=index))
    return pieces


def persistent_targets(module: Module) -> list[Piece]:
    """The whole parameters and persistent buffers of ``module``, read through ``named_parameters`` and
    ``named_buffers`` (for wrappers whose ``state_dict`` returns copies, such as FSDP1's)."""
    skipped = {
        f"{prefix}.{name}" if prefix else name
        for prefix, child in module.named_modules()
        for name in child._non_persistent_buffers_set
    }
    named = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    return [
        Piece(
            canonical(name),
            value.dtype,
            tuple(value.shape),
            (0,) * value.dim(),
            tuple(value.shape),
            tensor=value.detach(),
        )
        for name, value in named
        if name not in skipped
    ]
