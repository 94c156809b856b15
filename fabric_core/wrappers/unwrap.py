"""Taking the wrappers (and ``torch.compile``) off: what the strategy set up, for checkpoints and checks."""

from __future__ import annotations

import copy
import sys
from typing import Any

from torch.nn import Module

from fabric_core.utilities.apply_func import apply_to_collection
from fabric_core.wrappers.dataloader import FabricDataLoader
from fabric_core.wrappers.module import FabricModule
from fabric_core.wrappers.optimizer import FabricOptimizer

__all__ = ["is_wrapped", "recompile", "unwrap_compiled", "unwrap_for_checkpoint", "unwrap_objects"]


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
    """Compile ``module`` the way ``compiled`` was compiled (same backend and options).

    The ``torch.compile`` arguments that Lightning records on a compiled module (``_compile_kwargs``, set by
    its wrapper of ``torch.compile`` or by :func:`fabric_core.wrappers._capture_compile_kwargs`) are kept on
    the new one, as Lightning's ``Fabric.setup`` keeps them when it compiles again.
    """
    recompiled: Module = type(compiled)(module, compiled.dynamo_ctx)
    compile_kwargs = getattr(compiled, "_compile_kwargs", None)
    if compile_kwargs is not None:
        recompiled._compile_kwargs = copy.deepcopy(compile_kwargs)
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


def unwrap_for_checkpoint(collection: Any) -> Any:
    """Like :func:`unwrap_objects`, but a ``FabricDataLoader`` stays: its position in the data is its state."""
    types: tuple[type, ...] = (FabricModule, FabricOptimizer)
    optimized = _optimized_module_class()
    if optimized is not None:
        types = (*types, optimized)
    return apply_to_collection(collection, types, _unwrap)


def is_wrapped(obj: object) -> bool:
    """Whether ``obj`` was returned by ``fabric.setup*`` (a module, optimizer or dataloader wrapper).

    Args:
        obj: Any object; a ``torch.compile``-d wrapper counts as wrapped.
    """
    inner, _ = unwrap_compiled(obj)
    return isinstance(inner, (FabricModule, FabricOptimizer, FabricDataLoader))
