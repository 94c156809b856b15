"""What ``fabric.setup*`` returns: the user's module, optimizer and dataloader, wrapped.

The wrappers sit inside every training step, so each decides once, when it is built, what its step must
do: with full precision and a strategy that changes neither backward nor the optimizer step, a forward is
one extra Python call and an optimizer step a direct call of the real one.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import torch
from torch import Tensor
from torch.nn import Module
from torch.nn.modules import module as _torch_module
from torch.optim import Optimizer

from fabric_core._signature import accepted_keywords
from fabric_core.precision.precision import (
    Precision,
    autocast_of,
    checked_autocast,
    convert_floating_tensors,
    default_dtype_of,
    float_cast_of,
)
from fabric_core.strategies.strategy import Strategy
from fabric_core.utilities.apply_func import apply_to_collection, move_data_to_device

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

__all__ = [
    "FabricDataLoader",
    "FabricModule",
    "FabricOptimizer",
    "accepted_keywords",
    "is_wrapped",
    "overrides",
    "unwrap_compiled",
    "unwrap_objects",
]

#: Methods of a module that go through the strategy's forward without being marked (LightningModule's).
STEP_METHODS: Final = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
#: torch's process-wide module hooks; where they are not where torch keeps them, every call takes
#: ``Module.__call__`` (see ``FabricModule.__call__``).
_GLOBAL_HOOKS: Final = tuple(
    getattr(_torch_module, name, None)
    for name in (
        "_global_backward_pre_hooks",
        "_global_backward_hooks",
        "_global_forward_pre_hooks",
        "_global_forward_hooks",
    )
)
get_default_dtype: Final = torch.get_default_dtype
_tracing_state: Final = torch._C._get_tracing_state
_DIRECT_CALLS: Final = all(isinstance(hooks, dict) for hooks in _GLOBAL_HOOKS)
# Without them every wrapper's `_direct_call` is False, and these stand-ins are never read.
_global_bw_pre, _global_bw, _global_fw_pre, _global_fw = _GLOBAL_HOOKS if _DIRECT_CALLS else ({}, {}, {}, {})
_RAW_BACKWARD_MESSAGE: Final = (
    "The current strategy and precision selection requires you to call `fabric.backward(loss)` instead of"
    " `loss.backward()`."
)


#: ``None`` means the callable takes ``**kwargs`` (everything is passed on).


def overrides(obj: object, base: type, *names: str, count_plain: bool = False) -> bool:
    """Whether ``obj`` replaces any of the methods ``names`` of ``base`` (on its class or on itself).

    Methods that ``obj`` lists in its ``plain_hooks`` (see ``Precision.plain_hooks``) do not count unless
    ``count_plain``: they are overridden in the class but run like the base's in this configuration.
    """
    cls = type(obj)
    instance_attrs = getattr(obj, "__dict__", {})
    plain: frozenset[str] = frozenset() if count_plain else getattr(obj, "plain_hooks", frozenset())
    return any(
        name not in plain and (name in instance_attrs or getattr(cls, name) is not getattr(base, name))
        for name in names
    )


def guards_raw_backward(strategy: Strategy) -> bool:
    """Whether model outputs carry the guard against a raw ``loss.backward()``.

    Lightning's rule: the strategy or its precision overrides backward in its class, even where the override
    is plain in this configuration (``plain_hooks``).
    """
    return overrides(strategy, Strategy, "backward", count_plain=True) or overrides(
        strategy.precision, Precision, "pre_backward", "backward", "post_backward", count_plain=True
    )


class _BackwardState:
    """Whether ``fabric.backward`` is running (the guard on model outputs reads it), and whether it has run."""

    __slots__ = ("active", "used_by")

    def __init__(self) -> None:
        self.active = False
        #: Strategies whose ``fabric.backward`` has run: their training loop is known to call it.
        self.used_by: weakref.WeakSet[Strategy] = weakref.WeakSet()


backward_state: Final = _BackwardState()


def _guard_raw_backward(grad: Tensor) -> None:
    """The guard where backward differs (loss scaling, a strategy's backward): only `fabric.backward` may run it."""
    if not backward_state.active:
        raise RuntimeError(_RAW_BACKWARD_MESSAGE)


def _plain_guard(strategy: Strategy) -> Callable[[Tensor], None]:
    """The guard where backward is plain but the API still refuses a raw one (Lightning's rule).

    It lets a raw backward through once ``fabric.backward`` has run for ``strategy``: the gradients are the
    same, and the guard only points out the mistake in a loop that never calls ``fabric.backward``. So,
    once announced, ``fabric.backward`` needs no bookkeeping around each step's backward.
    """

    def guard(grad: Tensor) -> None:
        if not backward_state.active and strategy not in backward_state.used_by:
            raise RuntimeError(_RAW_BACKWARD_MESSAGE)

    return guard


def _attach_backward_guard(data: Any, guard: Callable[[Tensor], None]) -> None:
    """Hook every output tensor that requires grad, without rebuilding the output's containers."""
    if isinstance(data, Tensor):
        if data.requires_grad:
            data.register_hook(guard)  # type: ignore[no-untyped-call]
    elif isinstance(data, (list, tuple)):
        for item in data:
            _attach_backward_guard(item, guard)
    elif isinstance(data, Mapping):
        for item in data.values():
            _attach_backward_guard(item, guard)
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        for field in dataclasses.fields(data):
            _attach_backward_guard(getattr(data, field.name), guard)


def _direct_forward_state(module: Module) -> tuple[Module, dict[str, Any]] | None:
    """``(module, its __dict__)`` where calling ``module`` is ``Module.__call__``'s: without hooks, a
    ``forward`` call. ``FabricModule.__call__`` then checks the hooks itself and calls ``forward``."""
    cls = type(module)
    if cls.__call__ is not Module.__call__ or cls._call_impl is not Module._call_impl:
        return None
    return module, module.__dict__


def _precision_forward(state: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``FabricModule.forward`` where the precision converts or outputs are guarded (``state``: its ``__dict__``)."""
    forward_module: Module = state["_modules"]["_forward_module"]
    strategy: Strategy = state["_strategy"]
    precision: Precision = state["_precision"]
    input_dtype_of = state["_input_dtype_of"]
    if input_dtype_of is not None:
        dtype = input_dtype_of(precision)
        args = convert_floating_tensors(args, dtype)
        if kwargs:
            kwargs = convert_floating_tensors(kwargs, dtype)
    elif state["_converts_input"]:
        args, kwargs = precision.convert_input((args, kwargs))
    forward_context = state["_forward_context"]
    if forward_context is not None:
        with forward_context():
            output = forward_module(*args, **kwargs)
    else:
        output = forward_module(*args, **kwargs)
    output_dtype_of = state["_output_dtype_of"]
    if output_dtype_of is not None:
        output = convert_floating_tensors(output, output_dtype_of(precision))
    elif state["_converts_output"]:
        output = precision.convert_output(output)
    if state["_guards_backward"]:
        if state["_guard_always"]:
            _attach_backward_guard(output, _guard_raw_backward)
        elif strategy not in backward_state.used_by:
            _attach_backward_guard(output, _plain_guard(strategy))
        else:
            state["_guards_backward"] = False  # for good: this loop calls `fabric.backward`
    return output


class FabricModule(Module):
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
        precision = strategy.precision
        # The flags below were decided for this precision: the forward uses it, not a later replacement.
        self._precision = precision
        self._converts_input = overrides(precision, Precision, "convert_input")
        self._has_forward_context = overrides(precision, Precision, "forward_context")
        self._converts_output = overrides(precision, Precision, "convert_output")
        # A raw `loss.backward()` would skip what the strategy or precision does in backward (loss scaling):
        # outputs then carry a hook that refuses it. Nothing is hooked where backward is plain.
        self._guards_backward = guards_raw_backward(strategy)
        # Where those overrides are plain (bf16-mixed), a raw backward would compute the same gradients: the
        # guard only points out the mistake, and is dropped once `fabric.backward` has been seen to run
        # (hooking every output costs about 10% of a tiny model's step).
        self._guard_always = overrides(strategy, Strategy, "backward") or overrides(
            precision, Precision, "pre_backward", "backward", "post_backward"
        )
        self._plain_forward = not (
            self._converts_input or self._has_forward_context or self._converts_output or self._guards_backward
        )
        # Precisions whose conversions are plain float casts (`casts_floats_to`): the arguments are cast
        # directly, without the hooks' `(args, kwargs)` packing.
        self._input_dtype_of = float_cast_of(precision, "convert_input") if self._converts_input else None
        self._output_dtype_of = float_cast_of(precision, "convert_output") if self._converts_output else None
        # Bound once: the forward then spends no attribute lookup on it.
        self._forward_context = precision.forward_context if self._has_forward_context else None
        # Mixed precision as declared by the stock plugins (cast in, autocast, cast out to the default dtype):
        # `__call__` runs a one-argument forward inline, `(input dtype, autocast class checked for the pair)`.
        autocast = autocast_of(precision) if self._has_forward_context else None
        self._autocast_call = (
            (self._input_dtype_of(precision), checked_autocast(*autocast))
            if autocast is not None and self._input_dtype_of is not None and self._output_dtype_of is default_dtype_of
            else None
        )
        self._forward_module_state = _direct_forward_state(forward_module)
        self._direct_call = _DIRECT_CALLS
        self._fabric_module_initialized = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # `Module.__call__` costs two Python frames and eight hook checks per step; while this wrapper has
        # no hooks (`_direct_call`, cleared by every hook registration and by `compile()`) and no
        # process-wide ones exist, all it would do is call `forward`. State is read through `__dict__`: a
        # module's own attribute lookups are slow (its `__getattr__` keeps Python from specialising them).
        # (Under `torch.jit.trace` the direct call only drops this wrapper's scope name from the graph.)
        state = self.__dict__
        if not state["_direct_call"] or _global_fw or _global_fw_pre or _global_bw or _global_bw_pre:
            return super().__call__(*args, **kwargs)
        plain = state["_plain_forward"]
        autocast_call = state["_autocast_call"]
        if not plain and (autocast_call is None or len(args) != 1 or kwargs or state["_guards_backward"]):
            return _precision_forward(state, args, kwargs)
        # The strategy's module, called the way `Module.__call__` calls a module without hooks: its
        # `forward` directly (another two frames and seven slow attribute lookups less).
        module = state["_modules"]["_forward_module"]
        forward = module
        direct = state["_forward_module_state"]
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
        # `_precision_forward` for the stock mixed precisions and `forward(x)`, inline: its extra frame and
        # hook calls cost 2% of a small model's step.
        input_dtype, autocast = autocast_call
        x = args[0]
        if not isinstance(x, Tensor):
            x = convert_floating_tensors(x, input_dtype)
        elif x.dtype is not input_dtype and x.dtype.is_floating_point:
            x = x.to(dtype=input_dtype)
        with autocast():
            output = forward(x)
        default = get_default_dtype()
        if not isinstance(output, Tensor):
            return convert_floating_tensors(output, default)
        if output.dtype is not default and output.dtype.is_floating_point:
            return output.to(dtype=default)
        return output

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A copy (deepcopy, pickle) has a forward module of its own, with a `__dict__` of its own.
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        forward_module = self._modules.get("_forward_module")
        if "_forward_module_state" in state and forward_module is not None:
            self.__dict__["_forward_module_state"] = _direct_forward_state(forward_module)

    @property
    def module(self) -> Module:
        """The original module, as the user passed it to ``fabric.setup``."""
        original: Module = self._modules["_original_module"]  # type: ignore[assignment]
        return original

    @property
    def device(self) -> torch.device:
        """The device of the module's first parameter (or buffer); the strategy's device if it has none."""
        for param in self.module.parameters():
            return param.device
        for buffer in self.module.buffers():
            return buffer.device
        return self._strategy.root_device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the module's first floating-point parameter, else the default dtype."""
        for param in self.module.parameters():
            if param.is_floating_point():
                return param.dtype
        return torch.get_default_dtype()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the strategy's module on the inputs, converted for the precision."""
        state = self.__dict__
        if state["_plain_forward"]:
            return state["_modules"]["_forward_module"](*args, **kwargs)
        return _precision_forward(state, args, kwargs)

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

        def call_through_forward(*args: Any, **kwargs: Any) -> Any:
            original.__dict__["forward"] = method_as_forward
            try:
                return self.forward(*args, **kwargs)
            finally:
                restore_forward()

        return call_through_forward

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
            self.__dict__["_direct_call"] = False
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


def _registration_ending_direct_calls(name: str) -> Callable[..., Any]:
    registration: Callable[..., Any] = getattr(Module, name)

    @functools.wraps(registration)
    def register(self: FabricModule, *args: Any, **kwargs: Any) -> Any:
        self.__dict__["_direct_call"] = False  # from now on calls go through `Module.__call__`, which runs hooks
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


_FABRIC_OPTIMIZER_CLASSES: Final[dict[type[Optimizer], type[FabricOptimizer]]] = {}


def _fabric_optimizer_class(optimizer_class: type[Optimizer]) -> type[FabricOptimizer]:
    # A subclass of both, so that `isinstance(opt, torch.optim.SGD)` holds and LR schedulers accept it.
    cls = _FABRIC_OPTIMIZER_CLASSES.get(optimizer_class)
    if cls is None:
        cls = type(f"Fabric{optimizer_class.__name__}", (FabricOptimizer, optimizer_class), {})
        _FABRIC_OPTIMIZER_CLASSES[optimizer_class] = cls
    return cls


class FabricOptimizer(Optimizer):
    """The optimizer ``fabric.setup`` returns: steps through the strategy, then tells the callbacks.

    Its class is a subclass of the original optimizer's class, created once per optimizer class.
    ``param_groups``, ``state`` and ``defaults`` are the original's own objects, always, so LR schedulers
    and ``load_state_dict`` act on the optimizer that steps.

    Args:
        optimizer: The optimizer as the strategy set it up.
        strategy: The strategy that steps it.
        callbacks: Objects whose ``on_after_optimizer_step(strategy=..., optimizer=...)`` runs after each step.
    """

    # Not copied from the original: they must stay the original's (an LR scheduler may have patched `step`).
    _NOT_COPIED: Final = frozenset({"step", "state_dict", "param_groups", "state", "defaults", "__del__"})

    def __init__(self, optimizer: Optimizer, strategy: Strategy, callbacks: list[Any] | None = None) -> None:
        # Optimizer.__init__ is not called: the attributes are the original's.
        self.__dict__ = {k: v for k, v in optimizer.__dict__.items() if k not in self._NOT_COPIED}
        self.__class__ = _fabric_optimizer_class(type(optimizer))
        self._optimizer = optimizer
        self._strategy = strategy
        after_step: list[tuple[Callable[..., Any], dict[str, Any]]] = []
        for callback in callbacks or ():
            hook = getattr(callback, "on_after_optimizer_step", None)
            if callable(hook):
                keywords = accepted_keywords(hook)
                kwargs = {"strategy": strategy, "optimizer": optimizer}
                after_step.append((hook, {k: v for k, v in kwargs.items() if keywords is None or k in keywords}))
        self._after_step = after_step
        self._plain_step = not after_step and not (
            overrides(strategy, Strategy, "optimizer_step")
            or overrides(strategy.precision, Precision, "optimizer_step")
        )
        # `zero_grad` only ever delegates: the original's bound method, as an instance attribute, answers the
        # call without a wrapper frame (a quarter of a microsecond per step).
        self.zero_grad = optimizer.zero_grad  # type: ignore[method-assign]

    @property
    def optimizer(self) -> Optimizer:
        """The optimizer as the strategy set it up."""
        return self._optimizer

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self._optimizer.param_groups = value

    @property
    def state(self) -> Any:
        return self._optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self._optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self._optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self._optimizer.defaults = value

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step the optimizer through the strategy and precision, then run ``on_after_optimizer_step``."""
        state = self.__dict__  # one slow lookup instead of two (this class has `__getattr__`)
        if state["_plain_step"]:
            optimizer = state["_optimizer"]
            return optimizer.step() if closure is None else optimizer.step(closure)
        kwargs = {} if closure is None else {"closure": closure}
        output = self._strategy.optimizer_step(self._optimizer, **kwargs)
        for hook, hook_kwargs in self._after_step:
            hook(**hook_kwargs)
        return output

    def zero_grad(self, set_to_none: bool = True) -> None:  # replaced by the original's in `__init__`
        self._optimizer.zero_grad(set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state as the strategy gathers it (whole, for optimizers sharded across ranks)."""
        return self._strategy.get_optimizer_state(self._optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._optimizer.add_param_group(param_group)

    def __getattr__(self, name: str) -> Any:
        # Attributes the original gained after wrapping.
        optimizer = self.__dict__.get("_optimizer")
        if optimizer is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return getattr(optimizer, name)


class FabricDataLoader:
    """The dataloader ``fabric.setup_dataloaders`` returns: moves batches to the device and sets the epoch.

    Each ``iter()`` first calls ``set_epoch(n)`` on the sampler and on the batch sampler's sampler (each
    object once), where ``n`` counts the previous ``iter()`` calls, so that distributed shuffling changes
    from epoch to epoch without the user calling ``set_epoch``.

    Args:
        dataloader: The loader to wrap.
        device: Where batches go; ``None`` leaves them where the loader puts them.
    """

    def __init__(self, dataloader: DataLoader[Any], device: torch.device | None = None) -> None:
        self.__dict__.update(dataloader.__dict__)
        self._dataloader = dataloader
        self._device = device
        self._num_iter_calls = 0
        samplers: dict[int, Any] = {}
        batch_sampler = getattr(dataloader, "batch_sampler", None)
        for sampler in (getattr(dataloader, "sampler", None), getattr(batch_sampler, "sampler", None)):
            if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
                samplers[id(sampler)] = sampler
        self._epoch_samplers = list(samplers.values())

    @property
    def device(self) -> torch.device | None:
        """Where batches are moved; ``None`` when they are not."""
        return self._device

    @property
    def dataloader(self) -> DataLoader[Any]:
        """The wrapped loader."""
        return self._dataloader

    def __len__(self) -> int:
        return len(self._dataloader)

    def __iter__(self) -> Iterator[Any]:
        for sampler in self._epoch_samplers:
            sampler.set_epoch(self._num_iter_calls)
        self._num_iter_calls += 1
        if self._device is None:
            yield from self._dataloader
            return
        device = self._device
        for batch in self._dataloader:
            yield move_data_to_device(batch, device)


def _optimized_module_class() -> type | None:
    # No module can be compiled unless torch._dynamo was imported, and importing it costs seconds.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    cls: type | None = getattr(eval_frame, "OptimizedModule", None)
    return cls


def unwrap_compiled(obj: Any) -> tuple[Any, Module | None]:
    """Strip ``torch.compile``: return the module inside and the compiled wrapper (``None`` if not compiled)."""
    optimized = _optimized_module_class()
    if optimized is not None and isinstance(obj, optimized):
        inner: Module = getattr(obj, "_orig_mod")  # noqa: B009 - not typed on `type`
        compiled: Module = obj  # type: ignore[assignment]
        return inner, compiled
    return obj, None


def recompile(module: Module, compiled: Module) -> Module:
    """Compile ``module`` the way ``compiled`` was compiled (same backend and options)."""
    recompiled: Module = type(compiled)(module, compiled.dynamo_ctx)
    return recompiled


def _unwrap(obj: Any) -> Any:
    inner, _ = unwrap_compiled(obj)
    if isinstance(inner, FabricModule):
        forward_module, _ = unwrap_compiled(inner._forward_module)
        return forward_module
    if isinstance(inner, FabricOptimizer):
        return inner.optimizer
    if isinstance(inner, FabricDataLoader):
        return inner.dataloader
    return inner


def unwrap_objects(collection: Any) -> Any:
    """Replace every wrapper (and compiled module) in a nested collection by what the strategy set up."""
    types: tuple[type, ...] = (FabricModule, FabricOptimizer, FabricDataLoader)
    optimized = _optimized_module_class()
    if optimized is not None:
        types = (*types, optimized)
    return apply_to_collection(collection, types, _unwrap)


_unwrap_objects = unwrap_objects  # Lightning's name, which its examples import


def is_wrapped(obj: object) -> bool:
    """Whether ``obj`` was returned by ``fabric.setup*`` (a module, optimizer or dataloader wrapper).

    Args:
        obj: Any object; a ``torch.compile``-d wrapper counts as wrapped.
    """
    inner, _ = unwrap_compiled(obj)
    return isinstance(inner, (FabricModule, FabricOptimizer, FabricDataLoader))


# Lightning's private names, for code that checks `isinstance(x, _FabricModule)`.
_FabricModule = FabricModule
_FabricOptimizer = FabricOptimizer
_FabricDataLoader = FabricDataLoader
