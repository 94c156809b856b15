"""What ``fabric.setup*`` returns: the user's module, optimizer and dataloader, wrapped.

The wrappers sit inside every training step, so each decides once, when it is built, what its step must
do (:mod:`fabric_core.wrappers._plan`): with full precision and a strategy that changes neither backward nor
the optimizer step, a forward is one extra Python call and an optimizer step a direct call of the real one.

- :mod:`~fabric_core.wrappers.module`: ``FabricModule``; its call is the fast path in ``_fast_path``, the
  one module that relies on torch's internals.
- :mod:`~fabric_core.wrappers.optimizer`: ``FabricOptimizer``.
- :mod:`~fabric_core.wrappers.dataloader`: ``FabricDataLoader``.
- :mod:`~fabric_core.wrappers.unwrap`: taking wrappers and ``torch.compile`` off.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.nn import Module

from fabric_core._deferred import lightning_reexports
from fabric_core._signature import accepted_keywords
from fabric_core.wrappers._guard import backward_state
from fabric_core.wrappers._plan import StepPlan, overrides, step_plan
from fabric_core.wrappers.dataloader import FabricDataLoader
from fabric_core.wrappers.module import STEP_METHODS, FabricModule
from fabric_core.wrappers.optimizer import FabricOptimizer
from fabric_core.wrappers.unwrap import (
    is_wrapped,
    recompile,
    unwrap_compiled,
    unwrap_for_checkpoint,
    unwrap_objects,
)

__all__ = [
    "STEP_METHODS",
    "FabricDataLoader",
    "FabricModule",
    "FabricOptimizer",
    "StepPlan",
    "accepted_keywords",
    "backward_state",
    "is_wrapped",
    "overrides",
    "recompile",
    "step_plan",
    "unwrap_compiled",
    "unwrap_for_checkpoint",
    "unwrap_objects",
]

_unwrap_objects = unwrap_objects  # Lightning's name, which its examples import

# Lightning's private names, for code that checks `isinstance(x, _FabricModule)`.
_FabricModule = FabricModule
_FabricOptimizer = FabricOptimizer
_FabricDataLoader = FabricDataLoader

# Lightning's private names for the step methods a LightningModule routes through forward, and the type
# variable of `state_dict`.
_LIGHTNING_MODULE_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")
T_destination = TypeVar("T_destination", bound=dict[str, Any])


_UNRECORDED: Any = object()


def _unwrap_compiled(obj: Any) -> tuple[Any, dict[str, Any] | None]:
    """Lightning's form of :func:`unwrap_compiled`: the module inside ``torch.compile`` and how to compile again.

    The second item is ``None`` for an uncompiled object. Otherwise it is the ``torch.compile`` arguments the
    module recorded (``_compile_kwargs``, as Lightning's wrapper of ``torch.compile`` records them), or, for a
    module compiled without that record (fabric-core does not wrap ``torch.compile``), a handle that
    :func:`_to_compiled` turns back into the same compilation, read from the compiled module.

    Raises:
        RuntimeError: The module's record was set to ``None`` (as Lightning, which then knows nothing of how it
            was compiled): the record is there and says nothing, so it is not guessed past.
    """
    inner, compiled = unwrap_compiled(obj)
    if compiled is None:
        return inner, None
    recorded = getattr(compiled, "_compile_kwargs", _UNRECORDED)
    if recorded is _UNRECORDED:
        return inner, {"compiled": compiled}
    if recorded is None:
        raise RuntimeError(
            "Failed to determine the arguments that were used to compile the module: its `_compile_kwargs` record "
            "is None. Compile it again with `torch.compile(module, ...)`, or delete the attribute so that "
            "fabric-core reads the compilation from the module."
        )
    return inner, recorded


def _to_compiled(module: Module, compile_kwargs: dict[str, Any]) -> Module:
    """Compile ``module`` as :func:`_unwrap_compiled` found it, or with ``torch.compile``'s own arguments (which
    the result records as ``_compile_kwargs``, as in Lightning)."""
    compiled = compile_kwargs.get("compiled")
    if isinstance(compiled, Module) and len(compile_kwargs) == 1:
        return recompile(module, compiled)
    result: Module = torch.compile(module, **compile_kwargs)  # type: ignore[assignment]
    recorded: Any = copy.deepcopy(compile_kwargs)
    result._compile_kwargs = recorded
    return result


def _backward_hook(requires_backward: bool, *_: Any) -> None:
    """Refuse a backward that ``fabric.backward`` did not start, where the setup requires it."""
    if requires_backward and not backward_state.active:
        raise RuntimeError(
            "The current strategy and precision selection requires you to call `fabric.backward(loss)`"
            " instead of `loss.backward()`."
        )


def _capture_compile_kwargs(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a ``torch.compile``-like function so that a compiled module records the arguments it was given.

    fabric-core never applies it to ``torch.compile`` itself (it reads how a module was compiled from the
    module); it exists for code that wraps its own compile function the way Lightning does.
    """

    @functools.wraps(compile_fn)
    def capture(*args: Any, **kwargs: Any) -> Any:
        if not args or not isinstance(args[0], Module):
            return compile_fn(*args, **kwargs)  # used as a decorator, or compiling a function
        model, *rest = args
        compiled = compile_fn(model, *rest, **kwargs)
        compiled._compile_kwargs = copy.deepcopy(kwargs)
        return compiled

    return capture


def __getattr__(name: str) -> Any:
    if name == "_in_fabric_backward":  # Lightning's flag: whether `fabric.backward` is running now
        return backward_state.active
    return _lightning(name)


# Lightning Fabric's names that its own module at this path imports from its other modules.
_lightning = lightning_reexports(__name__)
