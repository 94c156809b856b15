"""Precisions that are float casts: the one declaration of what a precision does around the forward.

Half, double, mixed, DeepSpeed, bitsandbytes and FSDP precisions all cast floating inputs to a dtype, run the
forward in a context (a default dtype, or autocast), cast floating outputs back to the default dtype, and may
cast the module. Each declares that once, as a :class:`Conversions`, and :class:`FloatCastPrecision`'s
hooks do exactly what it says. The wrappers read the same object (``fabric_core.wrappers._plan``) and cast
the forward's arguments directly, so declaration and behaviour cannot drift apart: a subclass that overrides
a hook gets its hook called.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any, Final, TypeVar

import torch
from torch.nn import Module

from fabric_core.errors import ArgumentTypeError, InvalidConfigError
from fabric_core.precision.precision import Precision, convert_floating_tensors, default_dtype

__all__ = [
    "NO_CONVERSIONS",
    "PLAIN_HOOK_NAMES",
    "Conversions",
    "FloatCastPrecision",
    "mixed_conversions",
    "supported",
    "true_conversions",
]

_T = TypeVar("_T")

#: The training-step hooks a precision may declare plain (see :attr:`Conversions.plain_hooks`).
PLAIN_HOOK_NAMES: Final = frozenset({"pre_backward", "backward", "post_backward", "optimizer_step"})


def _check_dtype(field: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, torch.dtype):
        raise ArgumentTypeError(
            f"`Conversions({field}={value!r})`: expected a floating-point `torch.dtype` or None, "
            f"got {type(value).__name__}.",
            argument=field,
            value=value,
        )
    if not value.is_floating_point:
        raise InvalidConfigError(
            f"`Conversions({field}={value!r})`: only floating-point dtypes can be cast to, e.g. torch.bfloat16.",
            argument=field,
            value=value,
        )


@dataclasses.dataclass(frozen=True)
class Conversions:
    """What a float-cast precision does around each forward, and which of its step hooks are plain.

    Checked when made: a wrong declaration fails at the precision's construction instead of silently
    changing what a training step does.

    Attributes:
        input_dtype: Floating-point input tensors are cast to it (``None``: inputs as given).
        output_to_default: Floating-point outputs are cast back to ``torch.get_default_dtype()``.
        module_dtype: ``convert_module`` casts the module to it, and tensors created in ``init_tensor`` /
            ``init_module`` default to it (``None``: the module stays as it is).
        forward_dtype: The forward runs with this default dtype (tensors it creates match the parameters).
        autocast: ``(device type, dtype)``: the forward runs under ``torch.autocast`` instead.
        plain_hooks: Step hooks the class overrides that, in this configuration, do what the base
            :class:`~fabric_core.precision.precision.Precision` does (``"bf16-mixed"`` has no grad scaler).
            The wrappers then leave them out of the step: no detour through the strategy, no guard on a raw
            ``loss.backward()``. Names from :data:`PLAIN_HOOK_NAMES`.

    Raises:
        ArgumentTypeError: A dtype that is not a ``torch.dtype``, or an autocast that is not ``(str, dtype)``.
        InvalidConfigError: A dtype that is not floating point, both ``forward_dtype`` and ``autocast``, or
            a plain hook name that is not a step hook.
    """

    input_dtype: torch.dtype | None = None
    output_to_default: bool = False
    module_dtype: torch.dtype | None = None
    forward_dtype: torch.dtype | None = None
    autocast: tuple[str, torch.dtype] | None = None
    plain_hooks: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for field in ("input_dtype", "module_dtype", "forward_dtype"):
            _check_dtype(field, getattr(self, field))
        if self.autocast is not None:
            if not (
                isinstance(self.autocast, tuple)
                and len(self.autocast) == 2
                and isinstance(self.autocast[0], str)
                and isinstance(self.autocast[1], torch.dtype)
            ):
                raise ArgumentTypeError(
                    f"`Conversions(autocast={self.autocast!r})`: expected `(device type, dtype)`, e.g. "
                    "`('cuda', torch.bfloat16)`.",
                    argument="autocast",
                    value=self.autocast,
                )
            if self.forward_dtype is not None:
                raise InvalidConfigError(
                    f"`Conversions(forward_dtype={self.forward_dtype}, autocast={self.autocast!r})`: the forward "
                    "runs in one context. Declare either the default dtype or autocast.",
                    argument="forward_dtype",
                    value=self.forward_dtype,
                )
        unknown = set(self.plain_hooks) - PLAIN_HOOK_NAMES
        if unknown:
            raise InvalidConfigError(
                f"`Conversions(plain_hooks=...)`: {', '.join(sorted(map(repr, unknown)))} is not a step hook. "
                f"Valid choices: {', '.join(sorted(map(repr, PLAIN_HOOK_NAMES)))}.",
                argument="plain_hooks",
                value=self.plain_hooks,
            )


def supported(table: Mapping[str, _T], precision: str, call: str, where: str = "") -> _T:
    """What ``table`` holds for ``precision``: the check at the top of every float-cast precision's constructor.

    Args:
        table: The precision strings the class serves, each with what it needs (its dtype).
        precision: The string given.
        call: How the call reads in the error, e.g. ``"`HalfPrecision(precision='16-mixed')`"``.
        where: Said after "is not supported" (``" in DeepSpeed"``).

    Raises:
        InvalidConfigError: ``precision`` is not in ``table``; the message names the valid choices.
    """
    value = table.get(precision)
    if value is None:
        raise InvalidConfigError(
            # Lightning's sentence for its DeepSpeed and FSDP precisions, which its users' code matches.
            f"{call} is not supported{where}. `precision` must be one of: {', '.join(repr(name) for name in table)}.",
            argument="precision",
            value=precision,
        )
    return value


#: A precision that declares nothing: full precision.
NO_CONVERSIONS: Final = Conversions()


def true_conversions(dtype: torch.dtype) -> Conversions:
    """The casts of a "true" precision: module, inputs and the forward's default dtype in ``dtype``.

    Outputs leave the model converted back to ``torch.get_default_dtype()``.
    """
    return Conversions(input_dtype=dtype, output_to_default=True, module_dtype=dtype, forward_dtype=dtype)


def mixed_conversions(device: str, dtype: torch.dtype) -> Conversions:
    """The casts of a mixed precision: inputs to ``dtype``, the forward under autocast, outputs back."""
    return Conversions(input_dtype=dtype, output_to_default=True, autocast=(device, dtype))


#: ``Module`` methods that cast floating-point tensors only (complex and integer ones stay as they are).
_FLOATING_ONLY_CASTS: Final = {
    torch.float64: "double",
    torch.float32: "float",
    torch.float16: "half",
    torch.bfloat16: "bfloat16",
}


class FloatCastPrecision(Precision):
    """A precision whose forward hooks and module conversion are the casts its :attr:`conversions` declare.

    Subclasses set ``self._conversions`` in their constructor (or override :attr:`conversions` where the
    dtype is decided later). Overriding a hook still works: the wrappers call an overridden hook instead of
    reading the declaration.
    """

    _conversions: Conversions = NO_CONVERSIONS

    @property
    def conversions(self) -> Conversions:
        """What this precision does around the forward (see :class:`Conversions`)."""
        return self._conversions

    def convert_module(self, module: Module) -> Module:
        """Cast the module's floating-point parameters and buffers to the declared ``module_dtype``.

        Only floating-point tensors, as ``Module.double()`` and ``Module.half()`` cast: a complex buffer stays
        complex (``Module.to(dtype=...)`` would cast it too and drop its imaginary part), integers stay integers.
        """
        dtype = self.conversions.module_dtype
        if dtype is None:
            return module
        cast = _FLOATING_ONLY_CASTS.get(dtype)
        return getattr(module, cast)() if cast is not None else module.to(dtype=dtype)

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Tensors created inside default to the declared ``module_dtype``."""
        dtype = self.conversions.module_dtype
        return contextlib.nullcontext() if dtype is None else default_dtype(dtype)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast, or the default dtype set to ``forward_dtype``, as declared."""
        conversions = self.conversions
        if conversions.autocast is not None:
            device, dtype = conversions.autocast
            return torch.autocast(device, dtype=dtype)
        if conversions.forward_dtype is not None:
            return default_dtype(conversions.forward_dtype)
        return contextlib.nullcontext()

    def convert_input(self, data: Any) -> Any:
        """Cast floating-point input tensors to the declared ``input_dtype``."""
        dtype = self.conversions.input_dtype
        return data if dtype is None else convert_floating_tensors(data, dtype)

    def convert_output(self, data: Any) -> Any:
        """Cast floating-point output tensors back to ``torch.get_default_dtype()``, if declared."""
        if not self.conversions.output_to_default:
            return data
        return convert_floating_tensors(data, torch.get_default_dtype())
