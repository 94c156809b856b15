"""Walking nested batches: find their size and device, move, slice, concatenate and describe them.

These are the non-collective half of Accelerate's operations; :mod:`fabric_core.utilities.operations`
re-exports them next to the collectives. Nested lists, tuples (namedtuples too), mappings and dataclasses
are walked with :func:`~fabric_core.utilities.apply_func.apply_to_collection`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from fabric_core.utilities.apply_func import _is_dataclass_instance, _is_namedtuple, apply_to_collection

__all__ = [
    "TensorInformation",
    "concatenate",
    "convert_outputs_to_fp32",
    "convert_to_fp32",
    "find_batch_size",
    "find_device",
    "get_data_structure",
    "honor_type",
    "ignorant_find_batch_size",
    "initialize_tensors",
    "is_tensor_information",
    "is_torch_tensor",
    "send_to_device",
    "slice_tensors",
]

T = TypeVar("T")
_HALF_DTYPES = (torch.float16, torch.bfloat16)


@dataclasses.dataclass(frozen=True)
class TensorInformation:
    """The shape and dtype of a tensor, enough to allocate a receive buffer for it."""

    shape: torch.Size
    dtype: torch.dtype


def is_torch_tensor(obj: object) -> bool:
    """Whether ``obj`` is a ``torch.Tensor``."""
    return isinstance(obj, Tensor)


def is_tensor_information(obj: object) -> bool:
    """Whether ``obj`` is a :class:`TensorInformation`."""
    return isinstance(obj, TensorInformation)


def honor_type(obj: T, generator: Iterable[Any]) -> T:
    """Build an object of ``type(obj)`` from the items of ``generator`` (namedtuples included).

    Args:
        obj: The sequence whose type to keep.
        generator: The new items.
    """
    if _is_namedtuple(obj):
        return type(obj)(*generator)
    try:
        return type(obj)(generator)  # type: ignore[call-arg]
    except TypeError:
        # Sequence types whose constructor takes the items as separate arguments.
        return type(obj)(*generator)


class _LeafMeta(type):
    def __instancecheck__(cls, instance: object) -> bool:
        if isinstance(instance, (Tensor, str, bytes)):
            return True
        return not (
            isinstance(instance, (Mapping, Sequence)) or _is_namedtuple(instance) or _is_dataclass_instance(instance)
        )


class _Leaf(metaclass=_LeafMeta):
    """Matches every element of a nested collection that is not itself a collection."""


def _map_tensors(data: Any, function: Callable[[Tensor], Any], operation: str) -> Any:
    """Apply ``function`` to every tensor in ``data``; any other leaf is a ``TypeError``.

    Args:
        data: A tensor or a nested collection of tensors.
        function: Called once per tensor.
        operation: The public name of the caller, for the error message.

    Raises:
        TypeError: A leaf is not a tensor.
    """
    if isinstance(data, Tensor):
        return function(data)

    def visit(leaf: Any) -> Any:
        if isinstance(leaf, Tensor):
            return function(leaf)
        raise TypeError(
            f"Unsupported type {type(leaf).__qualname__} passed to `{operation}`: it takes tensors, or "
            "nested lists, tuples, dicts and dataclasses of tensors."
        )

    return apply_to_collection(data, _Leaf, visit, allow_frozen=True)


def send_to_device(
    tensor: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: str | Iterable[str] | None = None,
) -> Any:
    """Move every object with a ``.to`` method in a nested collection to ``device``.

    Args:
        tensor: A tensor, a module, or a nested collection of them; other leaves are returned as they are.
        device: The target device.
        non_blocking: Ask for an asynchronous copy (retried without it where ``.to`` does not take it).
        skip_keys: Mapping keys whose values stay where they are, at every level of nesting.
    """
    skip = frozenset([skip_keys] if isinstance(skip_keys, str) else skip_keys or ())
    return _send(tensor, device, non_blocking, skip)


def _send(data: Any, device: torch.device | str | int, non_blocking: bool, skip: frozenset[str]) -> Any:
    if isinstance(data, Tensor) or (not isinstance(data, type) and callable(getattr(data, "to", None))):
        try:
            moved = data.to(device, non_blocking=non_blocking)
        except TypeError:
            moved = data.to(device)
        return data if moved is None else moved
    if isinstance(data, Mapping):
        items = [(k, v if k in skip else _send(v, device, non_blocking, skip)) for k, v in data.items()]
        return _rebuild_mapping(data, items)
    if isinstance(data, (list, tuple)):
        return honor_type(data, (_send(v, device, non_blocking, skip) for v in data))
    return data


def _rebuild_mapping(data: Mapping[Any, Any], items: list[tuple[Any, Any]]) -> Any:
    if isinstance(data, defaultdict):
        return type(data)(data.default_factory, OrderedDict(items))
    try:
        return type(data)(items)  # type: ignore[call-arg]
    except TypeError:
        return dict(items)


def find_batch_size(data: Any) -> int:
    """The size of the first dimension of the first tensor in ``data`` (first item, first key).

    Raises:
        ValueError: ``data`` or a collection on the way is empty, or the tensor is 0-d.
        TypeError: The first leaf is not a tensor.
    """
    if isinstance(data, (list, tuple, Mapping)):
        if len(data) == 0:
            raise ValueError(f"Cannot find the batch size of an empty {type(data).__name__}.")
        return find_batch_size(next(iter(data.values())) if isinstance(data, Mapping) else data[0])
    if not isinstance(data, Tensor):
        raise TypeError(
            f"Cannot find the batch size of a {type(data).__qualname__}: the batch must hold tensors "
            "(in nested lists, tuples or dicts)."
        )
    if data.dim() == 0:
        raise ValueError("Cannot find the batch size of a 0-d tensor: it has no batch dimension.")
    return int(data.shape[0])


def ignorant_find_batch_size(data: Any) -> int | None:
    """Like :func:`find_batch_size`, but ``None`` where that raises."""
    try:
        return find_batch_size(data)
    except (ValueError, TypeError):
        return None


def find_device(data: Any) -> torch.device | None:
    """The device of the first tensor found (depth first) in ``data``; ``None`` if there is none."""
    if isinstance(data, Tensor):
        return data.device
    if isinstance(data, Mapping):
        data = data.values()
    elif not isinstance(data, (list, tuple)):
        return None
    for item in data:
        device = find_device(item)
        if device is not None:
            return device
    return None


def get_data_structure(data: Any) -> Any:
    """Replace every tensor in ``data`` by its :class:`TensorInformation`.

    Raises:
        TypeError: A leaf is not a tensor.
    """
    return _map_tensors(data, lambda t: TensorInformation(shape=t.shape, dtype=t.dtype), "get_data_structure")


def initialize_tensors(data_structure: Any) -> Any:
    """Allocate an uninitialised tensor for every :class:`TensorInformation` in ``data_structure``."""
    return apply_to_collection(
        data_structure, TensorInformation, lambda info: torch.empty(info.shape, dtype=info.dtype)
    )


def concatenate(data: Sequence[Any], dim: int = 0) -> Any:
    """Concatenate a list of batches of one structure into one batch of that structure.

    Args:
        data: The batches (tensors, or lists/tuples/mappings of them, nested alike).
        dim: The dimension to concatenate along.

    Raises:
        ValueError: ``data`` is empty.
        TypeError: A leaf is not a tensor (except in a list of one batch, which is returned as it is).
    """
    if len(data) == 0:
        raise ValueError("`concatenate` needs at least one batch, got an empty sequence.")
    first = data[0]
    if isinstance(first, (list, tuple)):
        return honor_type(first, (concatenate([d[i] for d in data], dim=dim) for i in range(len(first))))
    if isinstance(first, Mapping):
        return _rebuild_mapping(first, [(k, concatenate([d[k] for d in data], dim=dim)) for k in first])
    if isinstance(first, Tensor):
        return torch.cat(list(data), dim=dim)
    if len(data) == 1:
        return first
    raise TypeError(f"`concatenate` can only concatenate tensors, got {type(first).__qualname__}.")


def slice_tensors(data: Any, tensor_slice: Any) -> Any:
    """Index every tensor in ``data`` with ``tensor_slice`` (a ``slice``, an index, a mask, ...)."""
    return apply_to_collection(data, Tensor, lambda t: t[tensor_slice])


def convert_to_fp32(tensor: Any) -> Any:
    """Turn every float16/bfloat16 tensor in a nested collection into float32; leave the rest alone."""
    return apply_to_collection(tensor, Tensor, lambda t: t.float() if t.dtype in _HALF_DTYPES else t)


class _FP32Outputs:
    """A callable that converts the half-precision tensors its function returns to float32.

    A class rather than a closure so that it pickles (by reference to ``__wrapped__``): a model whose
    ``forward`` was wrapped can still be sent to spawned processes or saved with ``torch.save``.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.__wrapped__ = function
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.__wrapped__(*args, **kwargs))

    def __repr__(self) -> str:
        return f"convert_outputs_to_fp32({self.__wrapped__!r})"


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``model_forward`` so that its float16/bfloat16 outputs come back as float32.

    The wrapper exposes the original function as ``__wrapped__`` and pickles whenever it does.

    Args:
        model_forward: The function to wrap, typically ``model.forward``.
    """
    return _FP32Outputs(model_forward)
