"""Recursive maps over nested collections, and moving them between devices."""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import torch
from torch import Tensor

from fabric_core._deferred import lightning_reexports

__all__ = [
    "CONVERSION_DTYPES",
    "apply_to_collection",
    "convert_tensors_to_scalars",
    "convert_to_tensors",
    "move_data_to_device",
]

_BLOCKING_DEVICE_TYPES = ("cpu", "mps")


def _is_namedtuple(obj: object) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_asdict") and hasattr(obj, "_fields")


def _is_dataclass_instance(obj: object) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def apply_to_collection(
    data: Any,
    dtype: type | tuple[type, ...],
    function: Callable[..., Any],
    *args: Any,
    wrong_dtype: type | tuple[type, ...] | None = None,
    include_none: bool = True,
    allow_frozen: bool = False,
    **kwargs: Any,
) -> Any:
    """Apply ``function`` to every element of type ``dtype`` in a nested collection.

    Mappings (dict, OrderedDict, defaultdict), sequences (list, tuple, namedtuple) and dataclass instances
    are walked and rebuilt with their own type; other leaves are returned unchanged.

    Args:
        data: The collection (or a single element).
        dtype: The element type(s) to transform.
        function: Called as ``function(element, *args, **kwargs)``.
        wrong_dtype: Element types not to transform even if they match ``dtype``.
        include_none: Keep entries whose result is ``None``.
        allow_frozen: Allow rebuilding frozen dataclasses (otherwise a ``ValueError``).
    """
    if isinstance(data, dtype) and (wrong_dtype is None or not isinstance(data, wrong_dtype)):
        return function(data, *args, **kwargs)
    # Fast exits for the common leaves keep this cheap inside training loops.
    if data is None or isinstance(data, (str, bytes, int, float, bool, Tensor)):
        return data

    def recurse(value: Any) -> Any:
        return apply_to_collection(
            value,
            dtype,
            function,
            *args,
            wrong_dtype=wrong_dtype,
            include_none=include_none,
            allow_frozen=allow_frozen,
            **kwargs,
        )

    if isinstance(data, Mapping):
        items = [(k, recurse(v)) for k, v in data.items()]
        items = [(k, v) for k, v in items if include_none or v is not None]
        if isinstance(data, defaultdict):
            return type(data)(data.default_factory, OrderedDict(items))
        return type(data)(items)  # type: ignore[call-arg]  # Mapping subclasses take (key, value) pairs
    if _is_namedtuple(data):
        return type(data)(*(recurse(v) for v in data))
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        out = [recurse(v) for v in data]
        out = [v for v in out if include_none or v is not None]
        return type(data)(out) if isinstance(data, (list, tuple)) else out
    if _is_dataclass_instance(data):
        fields = {f.name: recurse(getattr(data, f.name)) for f in dataclasses.fields(data) if f.init}
        params = getattr(data, "__dataclass_params__", None)
        if params is not None and params.frozen and not allow_frozen:
            raise ValueError(
                f"A frozen dataclass was passed to `apply_to_collection` but this is not allowed: {data!r}. "
                "Pass `allow_frozen=True` to rebuild it."
            )
        return dataclasses.replace(data, **fields)
    return data


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """Move every tensor (and every object with a ``.to`` method) in ``batch`` to ``device``.

    The copy is non-blocking where the target device allows it.
    """
    device = torch.device(device) if not isinstance(device, torch.device) else device

    def to(data: Any) -> Any:
        if isinstance(data, Tensor):
            if data.device == device:
                return data
            return data.to(device, non_blocking=device.type not in _BLOCKING_DEVICE_TYPES)
        moved = data.to(device)
        return data if moved is None else moved

    return apply_to_collection(batch, _TransferableDataType, to)


class _TransferableDataTypeMeta(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, Tensor) or (
            not isinstance(instance, type) and callable(getattr(instance, "to", None))
        )


class _TransferableDataType(metaclass=_TransferableDataTypeMeta):
    """Matches any object with a callable ``.to`` (tensors, modules, batch objects)."""


_INT32_RANGE = range(-(2**31), 2**31)

#: Lightning's table of the tensor each Python number becomes in a collective: ``(type, converter)``, the
#: converter called as ``converter(value, device=...)``. :func:`convert_to_tensors` applies these dtypes (and
#: refuses an ``int`` outside ``int32``); a tuple, as the table is a record of that rule, not a hook.
CONVERSION_DTYPES: Final[tuple[tuple[type, Callable[..., Tensor]], ...]] = (
    (bool, functools.partial(torch.tensor, dtype=torch.uint8)),
    (int, functools.partial(torch.tensor, dtype=torch.int)),
    (float, functools.partial(torch.tensor, dtype=torch.float)),
)


def convert_to_tensors(data: Any, device: torch.device | str) -> Any:
    """Turn Python numbers and numpy arrays into tensors on ``device``; move tensors there.

    The dtypes are Lightning Fabric's, so a collective returns what it returns there: ``bool`` becomes
    ``uint8`` (a bool tensor is not reduced by every backend), ``int`` becomes ``int32``, ``float`` becomes
    ``float32``, and a numpy array keeps its dtype. Numpy scalars that are no Python number (``np.int64``)
    become tensors of their own dtype.

    Raises:
        InvalidConfigError: A Python ``int`` outside ``int32`` (also a ``RuntimeError``, as in Lightning).
    """
    try:
        import numpy as np

        number_types: tuple[type, ...] = (int, float, np.ndarray, np.number)
    except ImportError:  # pragma: no cover - numpy is optional
        number_types = (int, float)

    data = apply_to_collection(data, number_types, _number_to_tensor, device)
    return apply_to_collection(data, Tensor, lambda t: t.to(device))


def _number_to_tensor(value: Any, device: torch.device | str) -> Tensor:
    if isinstance(value, bool):
        return torch.tensor(value, dtype=torch.uint8, device=device)
    if isinstance(value, int):
        if value not in _INT32_RANGE:
            from fabric_core.errors import NumberOverflowError

            raise NumberOverflowError(
                f"The Python int {value} does not fit the int32 tensor that numbers are collected as "
                f"(from {_INT32_RANGE.start} to {_INT32_RANGE.stop - 1}). Pass a tensor instead, e.g. "
                f"`torch.tensor({value}, dtype=torch.int64)`.",
                argument="data",
                value=value,
            )
        return torch.tensor(value, dtype=torch.int32, device=device)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32, device=device)
    import numpy as np  # only numpy values reach this point

    if isinstance(value, np.ndarray):
        return _from_numpy(value, device)
    return torch.tensor(value, device=device)


def _from_numpy(value: Any, device: torch.device | str | int) -> Tensor:
    """A numpy array as a tensor on ``device``, keeping its dtype (shares memory where ``device`` is the CPU)."""
    return torch.from_numpy(value).to(device)


def convert_tensors_to_scalars(data: Any) -> Any:
    """Turn single-element tensors into Python numbers.

    Raises:
        ValueError: A tensor has more than one element.
    """

    def to_item(value: Tensor) -> Any:
        if value.numel() != 1:
            raise ValueError(
                f"The metric `{value}` does not contain a single element, thus it cannot be converted to a scalar."
            )
        return value.item()

    if type(data) is dict:  # what `fabric.log` passes, once per step: one level of names and scalars
        scalars = {}
        for key, value in data.items():
            if isinstance(value, Tensor):
                scalars[key] = to_item(value)
            elif value is None or isinstance(value, (int, float, str)):
                scalars[key] = value
            else:  # a nested collection (or another leaf type): the general walk
                return apply_to_collection(data, Tensor, to_item)
        return scalars
    return apply_to_collection(data, Tensor, to_item)


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
