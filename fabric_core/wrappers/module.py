"""``FabricModule``: what ``fabric.setup`` returns for a model; it runs the strategy's module under the precision.

Its call is :func:`fabric_core.wrappers._fast_path.fabric_module_call`; everything a call decides was decided
when the wrapper was built (:func:`fabric_core.wrappers._plan.step_plan`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final

import torch
from torch.nn import Module

from fabric_core.strategies.strategy import Strategy
from fabric_core.utilities._device_dtype import _DeviceDtypeModuleMixin, _update_properties
from fabric_core.wrappers._fast_path import CallState, fabric_module_call, precision_forward
from fabric_core.wrappers._plan import step_plan

__all__ = ["STEP_METHODS", "FabricModule"]

#: Methods of a module that go through the strategy's forward without being marked (LightningModule's).
STEP_METHODS: Final = frozenset({"training_step", "validation_step", "test_step", "predict_step"})


class _FabricModule(Module):
    """The module ``fabric.setup`` returns: runs the strategy's module under the precision's rules.

    ``forward`` converts the inputs to the precision's dtype, runs the strategy's module (e.g. DDP) under
    the precision's context, and converts floating outputs back to ``torch.get_default_dtype()``. Other
    attributes and methods come from the original module; ``state_dict`` keys have no wrapper prefix.

    Args:
        forward_module: The module as the strategy set it up (e.g. wrapped in DDP).
        strategy: The strategy that set it up; its precision decides the conversions.
        original_module: The user's module, if the strategy wrapped it.
    """

    def __init__(self, forward_module: Module, strategy: Strategy, original_module: Module | None = None) -> None:
        super().__init__()
        self._forward_module = forward_module
        self._original_module = original_module if original_module is not None else forward_module
        self._strategy = strategy
        self._forward_methods = set(STEP_METHODS)
        # Decided for this precision: the forward uses it, not a later replacement.
        self._precision = strategy.precision
        self._call = CallState(step_plan(strategy), strategy, forward_module)
        self._fabric_module_initialized = True

    # `Module.__call__` costs two Python frames and eight hook checks per step: while this wrapper has no
    # hooks, the fast path calls `forward` itself (its invariants are written in `_fast_path`).
    __call__ = fabric_module_call

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A copy (deepcopy, pickle) has a forward module of its own, with a `__dict__` of its own.
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        call = state.get("_call")
        if isinstance(call, CallState):
            self.__dict__["_call"] = call.copy_for(self._modules.get("_forward_module"))

    @property
    def module(self) -> Module:
        """The original module, as the user passed it to ``fabric.setup``."""
        original = self._modules.get("_original_module")
        if original is None:  # a stand-in that is no `Module` (a test's mock) is an ordinary attribute
            original = self.__dict__["_original_module"]
        return original

    @property
    def device(self) -> torch.device:
        """The device of the module's first parameter (or buffer); without any, the device a module that records
        it (``_DeviceDtypeModuleMixin``, as torchmetrics' metrics) was moved to, else the strategy's device."""
        module = self.module
        for param in module.parameters():
            return param.device
        for buffer in module.buffers():
            return buffer.device
        if isinstance(module, _DeviceDtypeModuleMixin):
            return module.device
        return self._strategy.root_device

    @property
    def dtype(self) -> torch.dtype | str:
        """The dtype of the module's first floating-point parameter; without any, the dtype a module that records
        it was moved to, else the default dtype."""
        module = self.module
        for param in module.parameters():
            if param.is_floating_point():
                return param.dtype
        if isinstance(module, _DeviceDtypeModuleMixin):
            return module.dtype
        return torch.get_default_dtype()

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`torch.nn.Module.to`; modules that record their device and dtype record the new ones, as
        they do when moved themselves (Lightning's wrapper is such a module)."""
        device, dtype = torch._C._nn._parse_to(*args, **kwargs)[:2]
        _update_properties(self, device=device, dtype=dtype)
        return super().to(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the strategy's module on the inputs, converted for the precision."""
        state = self.__dict__
        call: CallState = state["_call"]
        module = state["_modules"]["_forward_module"]
        if call.plan.plain_forward:
            return module(*args, **kwargs)
        return precision_forward(module, call, args, kwargs)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The original module's state dict (keys without a wrapper prefix)."""
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False) -> Any:
        """Load into the original module."""
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def mark_forward_method(self, method: str | Callable[..., Any]) -> None:
        """Make calls of ``method`` on this wrapper go through the strategy's forward (DDP hooks, FSDP gathers).

        Args:
            method: The method's name, or the bound method itself.

        Raises:
            TypeError: ``method`` is neither a string nor a method.
            ValueError: ``method`` is ``forward``.
            AttributeError: The original module has no such method.
        """
        if not isinstance(method, str) and not inspect.ismethod(method):
            raise TypeError(f"Expected a method or a string, but got: {type(method).__name__}")
        name = method if isinstance(method, str) else method.__name__
        if name == "forward":
            raise ValueError("You cannot mark the forward method itself as a forward method.")
        if not inspect.ismethod(getattr(self.module, name, None)):
            raise AttributeError(
                f"You marked '{name}' as a forward method, but `{type(self.module).__name__}.{name}` does not"
                " exist or is not a method."
            )
        self._forward_methods.add(name)

    def _redirect_through_forward(self, name: str) -> Callable[..., Any]:
        """Return a callable that runs ``original.<name>`` as if it were the forward of the strategy's module."""
        original = self.module
        had_own_forward = "forward" in original.__dict__
        own_forward = original.__dict__.get("forward")

        def restore_forward() -> None:
            if had_own_forward:
                original.__dict__["forward"] = own_forward
            else:
                original.__dict__.pop("forward", None)

        def method_as_forward(*args: Any, **kwargs: Any) -> Any:
            # Undo the swap first: the method may call the real forward itself.
            restore_forward()
            return getattr(original, name)(*args, **kwargs)

        def call_forward_module(*args: Any, **kwargs: Any) -> Any:
            original.__dict__["forward"] = method_as_forward
            try:
                return self.forward(*args, **kwargs)
            finally:
                restore_forward()

        return call_forward_module

    def _refuse_submodule_calls(self, method: Callable[..., Any], name: str) -> Callable[..., Any]:
        """Wrap a method of the original module so that it fails if it runs any submodule."""
        original = self.module

        @functools.wraps(method)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            called = False

            def note_call(*_: Any) -> None:
                nonlocal called
                called = True

            handles = [submodule.register_forward_hook(note_call) for submodule in original.modules()]
            try:
                output = method(*args, **kwargs)
            finally:
                for handle in handles:
                    handle.remove()
            if called:
                raise RuntimeError(
                    f"You are calling the method `{type(original).__name__}.{name}()` from outside the model. To"
                    " avoid issues with the currently selected strategy, explicitly mark it as a forward method"
                    f" with `fabric_model.mark_forward_method({name!r})` after `fabric.setup()`."
                )
            return output

        return guarded

    def __getattr__(self, name: str) -> Any:
        # Reached only when normal lookup fails: the wrapper's own parameters, buffers and submodules first,
        # then the original module's attributes.
        try:
            return super().__getattr__(name)
        except AttributeError:
            pass
        modules = self.__dict__.get("_modules", {})
        original = modules.get("_original_module")
        if original is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        wrapped_by_strategy = modules.get("_forward_module") is not original
        if wrapped_by_strategy and name in self.__dict__.get("_forward_methods", ()):
            return self._redirect_through_forward(name)
        attr = getattr(original, name)
        if wrapped_by_strategy and inspect.ismethod(attr):
            return self._refuse_submodule_calls(attr, name)
        return attr

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_compiled_call_impl":
            # `compile()` of the wrapper compiles the wrapper's call, which `Module.__call__` runs: the
            # original module must not get it.
            call = self.__dict__.get("_call")
            if call is not None:
                call.direct_call = False
            super().__setattr__(name, value)
            return
        if not self.__dict__.get("_fabric_module_initialized", False):
            super().__setattr__(name, value)
            return
        original = self.module
        wrapper_has = self._owns(name)
        if hasattr(original, name) or not wrapper_has:
            setattr(original, name, value)
        if wrapper_has:
            super().__setattr__(name, value)

    def _owns(self, name: str) -> bool:
        return (
            name in self.__dict__
            or name in self._parameters
            or name in self._buffers
            or name in self._modules
            or hasattr(type(self), name)
        )


#: The public name. The class keeps Lightning's name, which code checks (``type(x).__name__ == "_FabricModule"``).
FabricModule = _FabricModule


def _registration_ending_direct_calls(name: str) -> Callable[..., Any]:
    registration: Callable[..., Any] = getattr(Module, name)

    @functools.wraps(registration)
    def register(self: FabricModule, *args: Any, **kwargs: Any) -> Any:
        self.__dict__["_call"].direct_call = False  # from now on calls go through `Module.__call__` (hooks)
        return registration(self, *args, **kwargs)

    return register


for _name in (
    "register_forward_pre_hook",
    "register_forward_hook",
    "register_full_backward_pre_hook",
    "register_full_backward_hook",
    "register_backward_hook",
):
    setattr(FabricModule, _name, _registration_ending_direct_calls(_name))

