"""The step plan: what a training step must do for one (strategy, precision), decided once.

Every per-step decision of the wrappers and of ``fabric.backward`` comes from :func:`step_plan`, computed
when ``Fabric`` and the wrappers are built: whether the forward converts (and how), whether backward and
the optimizer step are plain, whether outputs are guarded against a raw ``loss.backward()``. The rule that
a hook "counts" is in one place, :func:`overrides`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Final

import torch

from fabric_core.precision.float_cast import FloatCastPrecision
from fabric_core.precision.precision import Precision, default_dtype
from fabric_core.strategies.strategy import Strategy

__all__ = ["BACKWARD_HOOKS", "StepPlan", "overrides", "step_plan"]

#: The precision hooks around backward.
BACKWARD_HOOKS: Final = ("pre_backward", "backward", "post_backward")
_FORWARD_HOOKS: Final = ("convert_input", "forward_context", "convert_output")


def overrides(obj: object, base: type, *names: str, count_plain: bool = False) -> bool:
    """Whether ``obj`` replaces any of the methods ``names`` of ``base`` (on its class or on itself).

    Hooks that a float-cast precision's conversions declare plain (``Conversions.plain_hooks``) do not count
    unless ``count_plain``: they are overridden in the class but run like the base's in this configuration.
    """
    cls = type(obj)
    instance_attrs = getattr(obj, "__dict__", {})
    plain: frozenset[str] = frozenset()
    if not count_plain and isinstance(obj, FloatCastPrecision):
        plain = obj.conversions.plain_hooks
    return any(
        # A class without the method (a `Mock` standing in for a strategy) answers it per instance: overridden.
        (name in instance_attrs or getattr(cls, name, None) is not getattr(base, name))
        and not (name in plain and name not in instance_attrs)
        for name in names
    )


@dataclasses.dataclass(frozen=True, slots=True)
class StepPlan:
    """What each training step does for one strategy and its precision (see :func:`step_plan`).

    Attributes:
        precision: The precision the plan was made for: the forward uses it, not a later replacement.
        input_dtype: Declared cast of floating inputs (the wrapper casts the arguments itself).
        convert_input: The precision's own ``convert_input`` hook, where it overrides it undeclared.
        forward_context: What the forward runs in (``None``: nothing).
        output_to_default: Declared cast of floating outputs back to ``torch.get_default_dtype()``.
        convert_output: The precision's own ``convert_output`` hook, where it overrides it undeclared.
        autocast: ``(device type, dtype)`` where ``forward_context`` is the precision's declared autocast.
        inline_autocast: The declared autocast comes with declared input and output casts (the stock mixed
            precisions): a one-argument forward then runs inline (see ``_fast_path``).
        plain_forward: The forward is the strategy's module's, with nothing around it.
        guards_backward: Outputs carry the guard against a raw ``loss.backward()`` (Lightning's rule: the
            strategy or precision overrides backward in its class, even where it is plain here).
        plain_backward: ``fabric.backward`` is ``loss.backward()`` (no strategy or precision backward runs).
        plain_step: ``optimizer.step()`` is the real optimizer's, without the strategy or precision.
    """

    precision: Precision
    input_dtype: torch.dtype | None
    convert_input: Callable[[Any], Any] | None
    forward_context: Callable[[], contextlib.AbstractContextManager[Any]] | None
    output_to_default: bool
    convert_output: Callable[[Any], Any] | None
    autocast: tuple[str, torch.dtype] | None
    inline_autocast: bool
    plain_forward: bool
    guards_backward: bool
    plain_backward: bool
    plain_step: bool

    @property
    def direct_backward(self) -> bool:
        """``fabric.backward`` is ``loss.backward()`` and no output guard must see it running."""
        return self.plain_backward and not self.guards_backward


def _own_hook(precision: Precision, name: str) -> Callable[..., Any] | None:
    """``precision``'s hook ``name`` where it must be called: overridden and not one that a declaration covers."""
    if name in getattr(precision, "__dict__", {}):
        hook: Callable[..., Any] = getattr(precision, name)
        return hook
    implementation = getattr(type(precision), name, None)
    if implementation is None:  # provided per instance only (a `Mock` precision): call what the instance has
        return getattr(precision, name)  # type: ignore[no-any-return]
    if implementation is getattr(Precision, name) or implementation is getattr(FloatCastPrecision, name):
        return None
    hook = getattr(precision, name)
    return hook


def step_plan(strategy: Strategy) -> StepPlan:
    """Decide what a training step must do for ``strategy`` and its precision as they are now."""
    precision = strategy.precision
    convert_input, forward_context, convert_output = (_own_hook(precision, name) for name in _FORWARD_HOOKS)
    input_dtype: torch.dtype | None = None
    output_to_default = False
    autocast: tuple[str, torch.dtype] | None = None
    if isinstance(precision, FloatCastPrecision):
        conversions = precision.conversions
        if convert_input is None:
            input_dtype = conversions.input_dtype
        if convert_output is None:
            output_to_default = conversions.output_to_default
        if forward_context is None:
            if conversions.autocast is not None:
                autocast = conversions.autocast
                forward_context = functools.partial(torch.autocast, autocast[0], dtype=autocast[1])
            elif conversions.forward_dtype is not None:
                forward_context = functools.partial(default_dtype, conversions.forward_dtype)
    backward_differs = overrides(strategy, Strategy, "backward") or overrides(precision, Precision, *BACKWARD_HOOKS)
    guards_backward = overrides(strategy, Strategy, "backward", count_plain=True) or overrides(
        precision, Precision, *BACKWARD_HOOKS, count_plain=True
    )
    converts = convert_input is not None or input_dtype is not None
    converts_out = convert_output is not None or output_to_default
    return StepPlan(
        precision=precision,
        input_dtype=input_dtype,
        convert_input=convert_input,
        forward_context=forward_context,
        output_to_default=output_to_default,
        convert_output=convert_output,
        # Mixed precision as declared (cast in, autocast, cast out to the default dtype): inlined.
        autocast=autocast,
        inline_autocast=autocast is not None and input_dtype is not None and output_to_default,
        plain_forward=not (converts or forward_context is not None or converts_out or guards_backward),
        guards_backward=guards_backward,
        plain_backward=not backward_differs,
        plain_step=not (
            overrides(strategy, Strategy, "optimizer_step") or overrides(precision, Precision, "optimizer_step")
        ),
    )
