"""FSDP1 calls on modules sharded with FSDP2: an error that says so and how to choose FSDP1.

Without it, ``FSDP.state_dict_type(model, ...)`` finds no FSDP1 unit, does nothing and fails on exit with
``KeyError: None``; ``FSDP.summon_full_params(model)`` silently gathers nothing; ``model.no_sync()`` is an
``AttributeError`` naming a torch class.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
from torch.nn import Module

from fabric_core.errors import InvalidConfigError

__all__ = ["FSDP2ModuleError", "NoSyncRefusal", "guard_fsdp1_calls", "refuse_no_sync"]

_HOW: Final = (
    "is sharded with FSDP2 (`fully_shard`), the default of `strategy='fsdp'`, and FSDP1's API does not apply to it. "
    "Either use Fabric's own API (`fabric.save(path, {'model': model})` with `FSDPStrategy(state_dict_type='full')`, "
    "`fabric.no_backward_sync(model)`, `fabric_core.utilities.GatheredParameters(model.parameters())`), or choose "
    "FSDP1: `Fabric(strategy='fsdp1')` or `FSDP1Strategy(...)` (`from fabric_core_fsdp import FSDP1Strategy`)."
)
#: The static methods of ``FullyShardedDataParallel`` guarded, each a context manager taking the module first.
_GUARDED: Final = ("state_dict_type", "summon_full_params")
_MARK: Final = "_fabric_core_fsdp2_guard"


class FSDP2ModuleError(InvalidConfigError, TypeError):
    """An FSDP1 API called on a module sharded with FSDP2."""


def _refuse_if_fsdp2(module: Any, call: str) -> None:
    if not isinstance(module, Module) or FullyShardedDataParallel.fsdp_modules(module):
        return
    if any(isinstance(m, FSDPModule) for m in module.modules()):
        raise FSDP2ModuleError(f"`{call}` on {type(module).__name__}: the module " + _HOW, argument="module")


def guard_fsdp1_calls() -> None:
    """Make ``FSDP.state_dict_type`` and ``FSDP.summon_full_params`` refuse modules sharded only with FSDP2.

    These are static methods of torch's class that receive the module and consult nothing of it that the
    strategy or Fabric's wrapper could answer for, so replacing them on the class is the only place to stop
    the call. The replacements check first and then call torch's own; a module with any FSDP1 unit (or none
    sharded at all) behaves exactly as before. Installed once, by the first FSDP2 setup in the process.
    """
    for name in _GUARDED:
        original = FullyShardedDataParallel.__dict__[name]
        if getattr(original, _MARK, False):
            continue
        function = original.__func__

        @functools.wraps(function)
        def guarded(module: Any, *args: Any, __function: Any = function, __name: str = name, **kwargs: Any) -> Any:
            _refuse_if_fsdp2(module, f"FullyShardedDataParallel.{__name}(model, ...)")
            return __function(module, *args, **kwargs)

        wrapper = staticmethod(guarded)
        setattr(guarded, _MARK, True)
        setattr(wrapper, _MARK, True)
        setattr(FullyShardedDataParallel, name, wrapper)


class NoSyncRefusal:
    """``model.no_sync()`` on an FSDP2 root: FSDP1's method, refused with what to use instead (picklable)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise FSDP2ModuleError("`model.no_sync()`: the module " + _HOW, argument="module")


def refuse_no_sync(root: Module) -> None:
    """Give the FSDP2 root ``root`` a ``no_sync`` that raises :class:`FSDP2ModuleError` (unless it has one)."""
    if not hasattr(root, "no_sync"):
        object.__setattr__(root, "no_sync", NoSyncRefusal())
