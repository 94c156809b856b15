"""The precision interface and the full-precision (``"32-true"``) default."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Generator, Iterator, Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.utilities.apply_func import apply_to_collection

__all__ = ["Precision", "convert_floating_tensors", "default_dtype"]


class Precision:
    """Full precision (``"32-true"``): every hook is a no-op. Other precisions override what differs.

    The wrappers call :meth:`convert_input`, :meth:`forward_context` and :meth:`convert_output` around
    every forward where a subclass overrides them, so these must cost nothing when there is nothing to do.
    Precisions that only cast floats declare it instead (:class:`~fabric_core.precision.float_cast.FloatCastPrecision`),
    and the wrappers then cast the forward's arguments themselves.
    """

    #: What the kernel knows this class by (see ``fabric_core.plugin_api.KIND_ATTRIBUTE``).
    __fabric_core_kind__: ClassVar[str] = "precision"

    #: The canonical precision string this plugin serves. A plain attribute, not a ``ClassVar``: classes
    #: that serve several strings (``HalfPrecision``: ``16-true`` and ``bf16-true``) set it per instance.
    precision: str = "32-true"

    def convert_module(self, module: Module) -> Module:
        """Convert the module's parameters and buffers (``module.to(dtype)`` for "true" precisions)."""
        return module

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Context for ``fabric.init_tensor()``: tensors are created in this precision's dtype."""
        return contextlib.nullcontext()

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Context for ``fabric.init_module()``: parameters are created in this precision's dtype."""
        return self.tensor_init_context()

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Context around the model's forward (autocast for mixed precision)."""
        return contextlib.nullcontext()

    def convert_input(self, data: Any) -> Any:
        """Convert floating-point tensors of the inputs to the compute dtype."""
        return data

    def convert_output(self, data: Any) -> Any:
        """Convert floating-point tensors of the outputs back to ``torch.get_default_dtype()``."""
        return data

    def pre_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        """Run before backward; returns the tensor to call :meth:`backward` on."""
        return tensor

    def backward(self, tensor: Tensor, model: Module | None, *args: Any, **kwargs: Any) -> None:
        """Run the backward pass."""
        tensor.backward(*args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated

    def post_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        """Run after backward."""
        return tensor

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Step the optimizer (through the grad scaler where there is one)."""
        return optimizer.step(**kwargs)

    def main_params(self, optimizer: Optimizer) -> Iterator[Tensor]:
        """The parameters the optimizer updates (what gradient clipping looks at)."""
        for group in optimizer.param_groups:
            yield from group["params"]

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Undo loss scaling of the gradients before clipping."""

    def state_dict(self) -> dict[str, Any]:
        """State to checkpoint (the grad scaler's)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def teardown(self) -> None:
        """Undo global changes made by this plugin."""


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Generator[None, None, None]:
    """Set ``torch.get_default_dtype()`` inside the block and restore it after."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def convert_floating_tensors(data: Any, dtype: torch.dtype) -> Any:
    """Cast every floating-point tensor in ``data`` to ``dtype``; other values are left alone.

    This runs around every forward, so it is built to cost nothing when there is nothing to do: lists,
    tuples and dicts are walked directly, tensors already in ``dtype`` are skipped, and a container is only
    rebuilt (with its own type) when one of its elements changed; otherwise ``data`` itself is returned.
    Other mappings and dataclass instances take the general, slower :func:`apply_to_collection` path.

    Args:
        data: A tensor or a nested collection of them.
        dtype: The floating-point dtype to cast to.

    Returns:
        ``data`` itself when nothing needed converting, else a converted copy.
    """
    if isinstance(data, Tensor):
        current = data.dtype
        if current is dtype or not current.is_floating_point:
            return data
        return data.to(dtype=dtype)  # the keyword skips torch's overload matching: ~0.4 µs less per call
    if isinstance(data, (list, tuple)):
        converted: list[Any] | None = None
        for index, value in enumerate(data):
            if isinstance(value, Tensor):  # inlined: a forward's positional tensors are the common case
                current = value.dtype
                new = value if current is dtype or not current.is_floating_point else value.to(dtype=dtype)
            else:
                new = convert_floating_tensors(value, dtype)
            if new is not value and converted is None:
                converted = list(data[:index])
            if converted is not None:
                converted.append(new)
        if converted is None:
            return data
        cls = type(data)
        if cls is not tuple and cls is not list and hasattr(data, "_fields"):  # namedtuple: fields are positional
            return cls(*converted)
        return cls(converted)
    if isinstance(data, dict):
        if not data:  # the kwargs of most forwards
            return data
        changed: dict[Any, Any] | None = None
        for key, value in data.items():
            new = convert_floating_tensors(value, dtype)
            if new is not value:
                if changed is None:
                    changed = {}
                changed[key] = new
        if changed is None:
            return data
        # copy.copy keeps the dict's own type and state (an OrderedDict's order, a defaultdict's factory).
        result = copy.copy(data)
        result.update(changed)
        return result
    if data is None or isinstance(data, (bool, int, float, str, bytes)):
        return data
    if isinstance(data, Mapping) or (dataclasses.is_dataclass(data) and not isinstance(data, type)):
        return apply_to_collection(data, Tensor, convert_floating_tensors, dtype, allow_frozen=True)
    return data
