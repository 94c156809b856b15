"""torch.distributed collectives on tensors and nested collections, shared by the parallel strategies.

``all_gather`` never lets mismatched shapes reach the backend (gloo aborts the process on them). Every call
starts with one collective of a fixed-size packet holding the shapes and dtypes of this rank's tensors, so
every rank sees all descriptions and takes the same decision: raise the same error everywhere, or go on.
The packet also carries the tensors' bytes when they fit, so a small dict of metrics costs one collective
instead of one per tensor; larger collections take one more collective, with all tensors of a device packed
into one buffer.

``all_reduce`` cannot afford that packet on every call (it would double the cost of a small reduction), so
it exchanges the shape and dtype only the first time a (shape, dtype, group) signature is seen. Every rank
adds a signature to its cache only after all ranks agreed on it, so the caches stay the same on every rank
and a later call that hits the cache costs one set lookup. A mismatch on a first use raises the same error
on every rank; a mismatch between two signatures each rank had already agreed on still reaches the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import torch
import torch.distributed as dist
from torch import Tensor

from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.apply_func import apply_to_collection

__all__ = [
    "DIST_AVAILABLE",
    "REDUCE_OP_NAMES",
    "agree_on_signature",
    "all_gather",
    "all_reduce",
    "default_backend_for_device",
    "distributed",
    "only_tensors",
    "resolve_reduce_op",
]

#: Whether this torch build has ``torch.distributed`` at all.
DIST_AVAILABLE: Final = dist.is_available()


def distributed() -> bool:
    """Whether a default process group exists (collectives then talk to the other processes)."""
    return DIST_AVAILABLE and dist.is_initialized()


def default_backend_for_device(device: torch.device) -> str:
    """The process-group backend torch uses for ``device``'s type (``nccl`` for cuda), else ``gloo``."""
    return dist.Backend.default_device_backend_map.get(device.type, "gloo") if DIST_AVAILABLE else "gloo"


# A torch built without distributed support has no ReduceOp: the names stand for themselves there (nothing is
# reduced across processes without a process group), so importing fabric_core still works on such builds.
_REDUCE_OP: Any = dist.ReduceOp if DIST_AVAILABLE else None
_SUM: Final = _REDUCE_OP.SUM if DIST_AVAILABLE else "sum"
_OPS: Final[dict[str, Any]] = {
    name: getattr(_REDUCE_OP, op) if DIST_AVAILABLE else name
    for name, op in (("sum", "SUM"), ("max", "MAX"), ("min", "MIN"), ("product", "PRODUCT"), ("prod", "PRODUCT"))
}
_MEAN_NAMES: Final = ("mean", "avg")
#: The strings ``all_reduce`` accepts as ``reduce_op``.
REDUCE_OP_NAMES: Final = (*_MEAN_NAMES, *_OPS)
#: ``reduce_op`` strings as spelled in :data:`REDUCE_OP_NAMES`, resolved (a caller's dict lookup, no call).
RESOLVED: Final[dict[str, tuple[Any, bool]]] = {
    **{name: (op, False) for name, op in _OPS.items()},
    **{name: (_SUM, True) for name in _MEAN_NAMES},
}

# Every dtype gets a small integer code for the shape exchange; the order is fixed by the torch version,
# which all ranks of a job share.
_DTYPES: Final[tuple[torch.dtype, ...]] = tuple(
    sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)
)
_DTYPE_CODE: Final[dict[torch.dtype, int]] = {d: i for i, d in enumerate(_DTYPES)}
# Integers of the fixed-size shape header. A description that does not fit (many or high-rank tensors)
# costs one more collective of the longest description.
_HEADER_SLOTS: Final = 64
_HEADER_BYTES: Final = 8 * _HEADER_SLOTS
# Tensors whose bytes fit in the packet after the header travel with it. Every rank receives every packet,
# so the payload shrinks in large worlds (to at least one aligned segment).
_MAX_INLINE_BYTES: Final = 3584
_INLINE_BUDGET: Final = 256 * 1024
# Segments in the packed byte buffer start at multiples of this, so that viewing them back as any dtype
# (complex128 is the widest) is aligned.
_ALIGN: Final = 16
#: ``(shape, dtype, group)`` of the tensors all ranks have reduced together. Identical on every rank: a
#: signature enters it only after every rank agreed on it, and it is cleared (everywhere at once) when full.
AGREED: Final[set[tuple[Any, ...]]] = set()
_MAX_AGREED: Final = 4096


def resolve_reduce_op(reduce_op: str | Any | None) -> tuple[Any, bool]:
    """Map ``reduce_op`` to a ``ReduceOp`` and whether the result must then be divided by the world size.

    The mean is always computed as a sum followed by a division, because gloo has no ``AVG``.

    Raises:
        InvalidConfigError: An unknown string or type.
    """
    resolved = RESOLVED.get(reduce_op) if isinstance(reduce_op, str) else None
    if resolved is not None:  # the common case, a lower-case name: one dict lookup per call
        return resolved
    if reduce_op is None:
        return _SUM, True
    if isinstance(reduce_op, str):
        key = reduce_op.lower()
        if key in _MEAN_NAMES:
            return _SUM, True
        if key in _OPS:
            return _OPS[key], False
    elif isinstance(reduce_op, dist.ReduceOp) or type(reduce_op).__name__ == "RedOpType":
        if reduce_op == dist.ReduceOp.AVG:
            return _SUM, True
        return reduce_op, False
    raise InvalidConfigError(
        f"`all_reduce(reduce_op={reduce_op!r})` is not a supported reduction. "
        f"Valid choices: {', '.join(repr(n) for n in REDUCE_OP_NAMES)} or a `torch.distributed.ReduceOp`.",
        argument="reduce_op",
        value=reduce_op,
    )


def all_reduce(tensor: Tensor, group: Any, op: Any, divide: bool) -> Tensor:
    """Reduce ``tensor`` across the processes of ``group`` in place and return it.

    ``op`` and ``divide`` come from :func:`resolve_reduce_op` (resolved once per call, not per tensor).
    A non-contiguous tensor is reduced in a contiguous copy, which is returned instead. For ``"mean"``,
    integer and bool tensors keep their dtype: the sum is divided by the world size and truncated toward
    zero (``mean([1, 2]) == 1``). Convert to a floating dtype first for an exact mean.
    """
    if (tensor.shape, tensor.dtype, group) not in AGREED:  # a first use: gloo aborts on mismatched shapes
        agree_on_signature(tensor, group)
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    dist.all_reduce(tensor, op=op, group=group)
    if divide:
        world_size = dist.get_world_size(group)
        if tensor.is_floating_point() or tensor.is_complex():
            tensor.div_(world_size)
        else:
            tensor.copy_(torch.div(tensor, world_size, rounding_mode="trunc"))
    return tensor


def agree_on_signature(tensor: Tensor, group: Any) -> None:
    """Check, with one small collective, that every rank reduces a tensor of this shape and dtype.

    Called by every rank at its first reduction of a signature; the signature is then cached.

    Raises:
        ValueError: On every rank alike, naming each rank's shape and dtype, when they differ. No collective
            runs on the data then, so the process group stays usable.
    """
    world_size = dist.get_world_size(group)
    description = _describe([tensor])
    header = [len(description), *description] if len(description) < _HEADER_SLOTS else [len(description)]
    slots = torch.tensor(header + [0] * (_HEADER_SLOTS - len(header)), dtype=torch.int64, device=tensor.device)
    packets = _gather_flat(slots, group, world_size).view(world_size, -1)
    descriptions = _read_descriptions(packets.view(torch.uint8), description, group, tensor.device, world_size)
    if any(d != descriptions[0] for d in descriptions):
        detail = ", ".join(f"rank {r}: {_decode(d)[0]}" for r, d in enumerate(descriptions))
        raise ValueError(
            f"`all_reduce` needs a tensor of the same shape and dtype on every rank, but the ranks passed "
            f"different ones ({detail}). Reduce tensors of a common shape (pad them first, e.g. with "
            "`fabric_core.utilities.operations.pad_across_processes`), or gather differently shaped tensors "
            "with `fabric_core.utilities.operations.gather_object`."
        )
    if len(AGREED) >= _MAX_AGREED:
        AGREED.clear()
    AGREED.add((tensor.shape, tensor.dtype, group))


def all_gather(data: Any, group: Any, device: torch.device, sync_grads: bool = False) -> Any:
    """Gather every tensor in ``data`` from all processes, stacked: shape ``(world_size, *shape)``.

    ``data`` is a tensor or a nested collection of tensors (dict, list, tuple, namedtuple, dataclass);
    the result has the same structure. Other leaves are returned unchanged.

    Every call starts with one collective of a fixed-size packet: the shapes and dtypes of this rank's
    tensors, followed by the tensors' bytes when they fit (a few KiB). Small collections are then done in
    that one collective; larger ones take one more (one per device), with all tensors packed in one buffer.

    Args:
        data: What this process contributes.
        group: The process group (``None`` for the default one).
        device: Where the packet travels (the process's device; NCCL needs CUDA).
        sync_grads: Keep the autograd graph, so that gradients flow back to every rank's input.

    Raises:
        ValueError: On every rank alike, when the ranks' tensors differ in number, shape or dtype. No
            collective runs on the data then, so the process group stays usable.
    """
    leaves, rebuild = _flatten(data)
    world_size = dist.get_world_size(group)
    layout = _Layout(leaves)
    capacity = _inline_capacity(world_size)
    inline = not sync_grads and layout.total <= capacity
    description = _describe(leaves)
    header = [len(description), *description] if len(description) < _HEADER_SLOTS else [len(description)]
    header_slots = torch.tensor(header + [0] * (_HEADER_SLOTS - len(header)), dtype=torch.int64, device=device)
    payload = layout.parts(capacity, device) if inline else [torch.zeros(capacity, dtype=torch.uint8, device=device)]
    packet = torch.cat([header_slots.view(torch.uint8), *payload])
    packets = _gather_flat(packet, group, world_size).view(world_size, -1)
    descriptions = _read_descriptions(packets, description, group, device, world_size)
    # Every rank saw the same descriptions, so every rank takes the same branch below.
    _check_same_everywhere(descriptions, leaves)
    if inline:
        gathered = layout.unpack(packets, _HEADER_BYTES)
    elif sync_grads:
        gathered = [_GatherWithGrad.apply(t, group, world_size) for t in leaves]  # type: ignore[no-untyped-call]
    elif len(leaves) == 1:
        gathered = [_gather_one(leaves[0], group, world_size)]
    else:
        gathered = _gather_packed(leaves, group, world_size)
    return rebuild(gathered)


def only_tensors(data: Any) -> bool:
    """Whether ``data`` is a tensor, or a plain dict, list or tuple holding tensors only (no conversion needed)."""
    if isinstance(data, Tensor):
        return True
    if type(data) in (dict, list, tuple):
        values = data.values() if isinstance(data, dict) else data
        return all(isinstance(v, Tensor) for v in values)
    return False


def _flatten(data: Any) -> tuple[list[Tensor], Callable[[list[Tensor]], Any]]:
    """The tensors in ``data`` in a fixed order, and how to rebuild ``data`` with other tensors in their place."""
    # Fast paths for what training loops gather most: a tensor, and flat dicts/lists/tuples of tensors.
    if isinstance(data, Tensor):
        return [data], lambda out: out[0]
    if only_tensors(data):
        if type(data) is dict:
            keys = list(data)
            return list(data.values()), lambda out: dict(zip(keys, out))
        return list(data), lambda out: type(data)(out)
    leaves: list[Tensor] = []
    apply_to_collection(data, Tensor, leaves.append)

    def rebuild(out: list[Tensor]) -> Any:
        results = iter(out)
        return apply_to_collection(data, Tensor, lambda _: next(results))

    return leaves, rebuild


def _inline_capacity(world_size: int) -> int:
    """Payload bytes sent with the shapes: a few KiB, less in large worlds (every rank receives them all)."""
    return min(_MAX_INLINE_BYTES, max(_ALIGN, (_INLINE_BUDGET // world_size) // _ALIGN * _ALIGN))


class _Layout:
    """Where each tensor's bytes sit in a packed buffer.

    Tensors are placed by decreasing element size, so every segment starts at a multiple of its own element
    size and can be viewed back as its dtype without padding; the total is rounded up to :data:`_ALIGN`.
    """

    def __init__(self, leaves: Sequence[Tensor]) -> None:
        self.leaves = leaves
        self.order = sorted(range(len(leaves)), key=lambda i: -leaves[i].element_size())
        self.offsets = [0] * len(leaves)
        end = 0
        for i in self.order:
            self.offsets[i] = end
            end += leaves[i].numel() * leaves[i].element_size()
        self.used = end
        self.total = -(-end // _ALIGN) * _ALIGN

    def parts(self, size: int, device: torch.device) -> list[Tensor]:
        """The byte views to concatenate into a buffer of ``size`` bytes on ``device`` (zeros after the tensors)."""
        out = [_as_bytes(self.leaves[i], device) for i in self.order]
        if size > self.used:
            out.append(torch.zeros(size - self.used, dtype=torch.uint8, device=device))
        return out

    def unpack(self, rows: Tensor, start: int) -> list[Tensor]:
        """Read every rank's tensors from ``rows`` (one row of bytes per rank), stacked per tensor."""
        out = []
        for t, offset in zip(self.leaves, self.offsets):
            begin = start + offset
            segment = rows[:, begin : begin + t.numel() * t.element_size()]
            # A slice of every rank's row is not contiguous, so `reshape` copies it into a fresh tensor.
            stacked = segment.view(t.dtype).reshape(rows.shape[0], *t.shape)
            out.append(stacked if stacked.device == t.device else stacked.to(t.device))
        return out


def _describe(leaves: Sequence[Tensor]) -> list[int]:
    description = [len(leaves)]
    for t in leaves:
        description += [_DTYPE_CODE.get(t.dtype, -1), t.dim(), *t.shape]
    return description


def _read_descriptions(
    packets: Tensor, mine: list[int], group: Any, device: torch.device, world_size: int
) -> list[list[int]]:
    """Every rank's description, from the gathered packets (plus one collective if one did not fit)."""
    rows = packets.view(torch.int64)[:, :_HEADER_SLOTS].tolist()
    lengths = [int(row[0]) for row in rows]
    if max(lengths) < _HEADER_SLOTS:
        return [row[1 : n + 1] for row, n in zip(rows, lengths)]
    padded = torch.zeros(max(lengths), dtype=torch.int64)
    padded[: len(mine)] = torch.tensor(mine, dtype=torch.int64)
    rows = _gather_flat(padded.to(device), group, world_size).view(world_size, -1).tolist()
    return [row[:n] for row, n in zip(rows, lengths)]


def _check_same_everywhere(descriptions: list[list[int]], leaves: Sequence[Tensor]) -> None:
    reference = descriptions[0]
    if all(d == reference for d in descriptions):
        return
    per_rank = [_decode(d) for d in descriptions]
    counts = {len(p) for p in per_rank}
    if len(counts) > 1:
        detail = ", ".join(f"rank {r}: {len(p)}" for r, p in enumerate(per_rank))
        problem = f"the ranks passed different numbers of tensors ({detail})"
    else:
        index = next(i for i in range(len(per_rank[0])) if len({p[i] for p in per_rank}) > 1)
        detail = ", ".join(f"rank {r}: {p[index]}" for r, p in enumerate(per_rank))
        where = f"tensor {index + 1} of {len(per_rank[0])} in the collection" if len(leaves) > 1 else "the tensor"
        problem = f"{where} differs across ranks ({detail})"
    raise ValueError(
        f"`all_gather` needs the same number of tensors, with the same shapes and dtypes, on every rank, but "
        f"{problem}. Pad the tensors to a common shape first (for a varying first dimension: "
        "`fabric_core.utilities.operations.pad_across_processes`), or gather Python objects with "
        "`fabric_core.utilities.operations.gather_object`."
    )


def _decode(description: list[int]) -> list[str]:
    out: list[str] = []
    i = 1
    while i < len(description):
        code, ndim = description[i], description[i + 1]
        shape = tuple(description[i + 2 : i + 2 + ndim])
        dtype = str(_DTYPES[code]).removeprefix("torch.") if 0 <= code < len(_DTYPES) else "?"
        out.append(f"{dtype}{list(shape)}")
        i += 2 + ndim
    return out


def _gather_flat(tensor: Tensor, group: Any, world_size: int) -> Tensor:
    """Gather a 1-d contiguous tensor of equal size on every rank into one ``(world_size * n,)`` tensor."""
    out = torch.empty(world_size * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
    if out.numel() == 0:
        return out
    # `all_gather_single` is the newer name of `all_gather_into_tensor` (deprecated in recent torch).
    gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather_into(out, tensor, group=group)
    return out


def _gather_one(tensor: Tensor, group: Any, world_size: int) -> Tensor:
    flat = _gather_flat(tensor.contiguous().view(-1), group, world_size)
    return flat.view(world_size, *tensor.shape)


class _GatherWithGrad(torch.autograd.Function):
    """All-gather whose backward sends each rank the sum, over all ranks, of the gradient of its slot."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Any, world_size: int) -> Tensor:
        ctx.group = group
        ctx.rank = dist.get_rank(group)
        return _gather_one(tensor, group, world_size)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Tensor) -> tuple[Tensor, None, None]:
        grad = grad_outputs[0].contiguous()
        # Every rank used the gathered tensor in its own loss: this rank's input gets all their gradients.
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank], None, None


def _gather_packed(leaves: Sequence[Tensor], group: Any, world_size: int) -> list[Tensor]:
    """Gather many tensors with one collective per device: their bytes packed into one buffer."""
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(leaves):
        by_device.setdefault(t.device, []).append(i)
    results: dict[int, Tensor] = {}
    for device, indices in by_device.items():
        layout = _Layout([leaves[i] for i in indices])
        buffer = torch.cat(layout.parts(layout.total, device))
        rows = _gather_flat(buffer, group, world_size).view(world_size, layout.total)
        results.update(zip(indices, layout.unpack(rows, 0)))
    return [results[i] for i in range(len(leaves))]


def _as_bytes(tensor: Tensor, device: torch.device) -> Tensor:
    if tensor.requires_grad:
        tensor = tensor.detach()
    raw = tensor.reshape(-1).view(torch.uint8)
    return raw if raw.device == device else raw.to(device)
