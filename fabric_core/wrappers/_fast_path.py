"""The forward fast path of ``FabricModule``: the one place that relies on torch's module internals.

``Module.__call__`` costs two Python frames and eight hook checks per step. Where nothing would run but
``forward``, :func:`fabric_module_call` calls ``forward`` itself. Its invariants, checked by
``tests/wrappers/test_fast_path.py`` (invariant 4 by ``test_wrappers.py::test_tracing_a_model_that_calls_the_wrapper``):

1. torch keeps its process-wide module hooks in the dicts ``torch.nn.modules.module._global_*hooks``
   (:data:`DIRECT_CALLS`); where it does not, every call takes ``Module.__call__``.
2. A module's own hooks are in its ``__dict__`` under ``_forward_hooks``, ``_forward_pre_hooks``,
   ``_backward_hooks``, ``_backward_pre_hooks``; ``torch.compile`` of a module sets ``_compiled_call_impl``.
   A class that replaces ``__call__`` or ``_call_impl`` is always called through them.
3. Registering a hook on the wrapper, or compiling it, ends direct calls for good (``CallState.direct_call``);
   the strategy's module is checked on every call, since its hooks may come and go.
4. Under ``torch.jit.trace`` (``torch._C._get_tracing_state()``) the strategy's module is called normally.
5. ``torch.autocast`` keeps its settings as instance attributes set in ``__init__`` and enters through
   ``__enter__``: :func:`checked_autocast` builds a subclass whose settings are class attributes.
6. Everything here was decided when the wrapper was built (``StepPlan``); a call adds no decision of its own
   beyond the hook checks above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import torch
from torch import Tensor
from torch.nn import Module
from torch.nn.modules import module as _torch_module

from fabric_core.precision.precision import convert_floating_tensors
from fabric_core.wrappers._guard import attach_backward_guard, guard_raw_backward
from fabric_core.wrappers._plan import StepPlan

if TYPE_CHECKING:
    from fabric_core.strategies.strategy import Strategy

__all__ = ["DIRECT_CALLS", "CallState", "checked_autocast", "direct_forward_state", "fabric_module_call"]

#: torch's process-wide module hooks (invariant 1).
_GLOBAL_HOOKS: Final = tuple(
    getattr(_torch_module, name, None)
    for name in (
        "_global_backward_pre_hooks",
        "_global_backward_hooks",
        "_global_forward_pre_hooks",
        "_global_forward_hooks",
    )
)
DIRECT_CALLS: Final = all(isinstance(hooks, dict) for hooks in _GLOBAL_HOOKS)
# Without them every wrapper's `direct_call` is False, and these stand-ins are never read.
_global_bw_pre, _global_bw, _global_fw_pre, _global_fw = _GLOBAL_HOOKS if DIRECT_CALLS else ({}, {}, {}, {})
_get_default_dtype: Final = torch.get_default_dtype
_tracing_state: Final = torch._C._get_tracing_state
_CHECKED_AUTOCASTS: Final[dict[tuple[str, torch.dtype], type[torch.autocast]]] = {}


def checked_autocast(device: str, dtype: torch.dtype) -> type[torch.autocast]:
    """A ``torch.autocast`` class for ``(device, dtype)`` whose arguments were checked once, when it was made.

    ``torch.autocast(device, dtype=dtype)`` checks device and dtype on every construction, about 0.85 µs:
    1.5% of a small model's step when done per forward. An instance of the returned class starts as that
    object would (its settings are class attributes), and enters and exits through ``torch.autocast``'s own
    methods. Each instance keeps its own saved state, so nesting and threads are as safe as with
    ``torch.autocast``.

    Args:
        device: The device type, as ``torch.autocast`` takes it (``"cpu"``, ``"cuda"``).
        dtype: The autocast dtype.

    Returns:
        A subclass of ``torch.autocast`` whose constructor takes no arguments.

    Raises:
        RuntimeError: ``device`` is not a device type (torch's own check). A dtype the device cannot autocast
            to gives torch's warning once, here, and an autocast that is disabled.
    """
    key = (device, dtype)
    cls = _CHECKED_AUTOCASTS.get(key)
    if cls is None:
        settings = vars(torch.autocast(device, dtype=dtype))  # torch checks the pair here, once
        # `object.__init__` is a C call that takes no arguments: the settings are the class's.
        namespace = {**settings, "__init__": object.__init__, "__module__": __name__}
        cls = type(f"CheckedAutocast[{device}, {dtype}]", (torch.autocast,), namespace)
        _CHECKED_AUTOCASTS[key] = cls
    return cls


def direct_forward_state(module: Module) -> tuple[Module, dict[str, Any]] | None:
    """``(module, its __dict__)`` where calling ``module`` is ``Module.__call__``'s: without hooks, a
    ``forward`` call (invariant 2). ``None`` for a class that replaces the call."""
    cls = type(module)
    if cls.__call__ is not Module.__call__ or cls._call_impl is not Module._call_impl:
        return None
    return module, module.__dict__


class CallState:
    """What one ``FabricModule``'s calls read: its plan, and the little that changes after it was built.

    Typed attributes in slots, so that mypy checks every name and a call reads them without a module's slow
    ``__getattr__``.

    Args:
        plan: The step plan of the wrapper's strategy.
        strategy: The strategy.
        forward_module: The strategy's module (``None``: none to call directly).
    """

    __slots__ = (
        "autocast_call",
        "direct_call",
        "forward_context",
        "forward_module_state",
        "guards_backward",
        "plan",
        "strategy",
    )

    def __init__(self, plan: StepPlan, strategy: Strategy, forward_module: Module | None) -> None:
        self.plan: Final = plan
        self.strategy: Final = strategy
        #: Cleared for good by a hook registered on the wrapper, or by compiling it (invariant 3).
        self.direct_call = DIRECT_CALLS
        #: Outputs carry the guard against a raw ``loss.backward()`` (Lightning's rule, see ``StepPlan``).
        self.guards_backward = plan.guards_backward
        self.forward_module_state = direct_forward_state(forward_module) if forward_module is not None else None
        # The declared autocast, checked once (invariant 5).
        autocast = checked_autocast(*plan.autocast) if plan.autocast is not None else None
        self.forward_context: Callable[[], Any] | None = autocast or plan.forward_context
        #: ``(input dtype, autocast class)``: a one-argument forward of the stock mixed precisions, inlined.
        self.autocast_call: tuple[torch.dtype, Callable[[], Any]] | None = None
        if plan.inline_autocast and autocast is not None and plan.input_dtype is not None:
            self.autocast_call = (plan.input_dtype, autocast)

    def __getstate__(self) -> tuple[StepPlan, Strategy, bool, bool]:
        # The checked autocast class is made at run time and cannot be pickled: it is made again on load.
        return self.plan, self.strategy, self.direct_call, self.guards_backward

    def __setstate__(self, state: tuple[StepPlan, Strategy, bool, bool]) -> None:
        plan, strategy, direct_call, guards_backward = state
        self.__init__(plan, strategy, None)  # type: ignore[misc]  # the wrapper's `__setstate__` sets the module
        self.direct_call = direct_call
        self.guards_backward = guards_backward

    def copy_for(self, forward_module: Module | None) -> CallState:
        """This state for a copy of the wrapper (deepcopy, pickle), whose forward module is its own."""
        copy = CallState(self.plan, self.strategy, forward_module)
        copy.direct_call = self.direct_call
        copy.guards_backward = self.guards_backward
        return copy


def precision_forward(module: Module, call: CallState, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The forward where the precision converts or outputs are guarded (``module``: the strategy's)."""
    plan = call.plan
    if plan.input_dtype is not None:
        dtype = plan.input_dtype
        args = convert_floating_tensors(args, dtype)
        if kwargs:
            kwargs = convert_floating_tensors(kwargs, dtype)
    elif plan.convert_input is not None:
        args, kwargs = plan.convert_input((args, kwargs))
    forward_context = call.forward_context
    if forward_context is not None:
        with forward_context():
            output = module(*args, **kwargs)
    else:
        output = module(*args, **kwargs)
    if plan.output_to_default:
        output = convert_floating_tensors(output, _get_default_dtype())
    elif plan.convert_output is not None:
        output = plan.convert_output(output)
    if call.guards_backward:
        attach_backward_guard(output, guard_raw_backward)
    return output


def fabric_module_call(self: Module, *args: Any, **kwargs: Any) -> Any:
    """``FabricModule.__call__``: ``forward`` without ``Module.__call__`` where no hook could run."""
    # State is read through `__dict__`: a module's own attribute lookups are slow (its `__getattr__` keeps
    # Python from specialising them). (Under `torch.jit.trace` the direct call only drops this wrapper's scope
    # name from the graph.)
    state = self.__dict__
    call: CallState = state["_call"]
    if not call.direct_call or _global_fw or _global_fw_pre or _global_bw or _global_bw_pre:
        return Module.__call__(self, *args, **kwargs)
    module = state["_modules"]["_forward_module"]
    plan = call.plan
    plain = plan.plain_forward
    autocast_call = call.autocast_call
    if not plain and (autocast_call is None or len(args) != 1 or kwargs):
        return precision_forward(module, call, args, kwargs)
    # The strategy's module, called the way `Module.__call__` calls a module without hooks: its `forward`
    # directly (another two frames and seven slow attribute lookups less).
    forward = module
    direct = call.forward_module_state
    if direct is not None and direct[0] is module:
        module_state = direct[1]
        if not (
            module_state["_forward_hooks"]
            or module_state["_forward_pre_hooks"]
            or module_state["_backward_hooks"]
            or module_state["_backward_pre_hooks"]
            or module_state.get("_compiled_call_impl") is not None
            or _tracing_state() is not None
        ):
            forward = module.forward
    if plain:
        return forward(*args, **kwargs)
    # `precision_forward` for the stock mixed precisions and `forward(x)`, inline: its extra frame and hook
    # calls cost 2% of a small model's step.
    input_dtype, autocast = autocast_call  # type: ignore[misc]  # not None: `plain` is False here
    x = args[0]
    if not isinstance(x, Tensor):
        x = convert_floating_tensors(x, input_dtype)
    elif x.dtype is not input_dtype and x.dtype.is_floating_point:
        x = x.to(dtype=input_dtype)
    with autocast():
        output = forward(x)
    default = _get_default_dtype()
    if not isinstance(output, Tensor):
        output = convert_floating_tensors(output, default)
    elif output.dtype is not default and output.dtype.is_floating_point:
        output = output.to(dtype=default)
    if call.guards_backward:  # the stock mixed precisions: their backward hooks make Lightning's rule apply
        if type(output) is Tensor:
            if output.requires_grad:
                output.register_hook(guard_raw_backward)  # type: ignore[no-untyped-call]
        else:
            attach_backward_guard(output, guard_raw_backward)
    return output
