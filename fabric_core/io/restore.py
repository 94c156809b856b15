"""Restoring a user's ``state`` dict from a loaded checkpoint, with Lightning Fabric's semantics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch.nn import Module
from torch.optim import Optimizer

if TYPE_CHECKING:
    from fabric_core.strategies.strategy import Strategy

__all__ = ["restore_state"]


def restore_state(
    strategy: Strategy, state: dict[str, Any], checkpoint: dict[str, Any], strict: bool = True
) -> dict[str, Any]:
    """Load each entry of ``checkpoint`` into the object of the same key in ``state``.

    Modules and optimizers (and any object with ``load_state_dict``) are restored in place; plain values
    are written back into ``state``. Returns what the checkpoint holds that ``state`` did not ask for.

    Raises:
        KeyError: With ``strict``, ``state`` asks for a key the checkpoint does not have.
    """
    from fabric_core.strategies.strategy import Stateful

    if strict:
        missing = [k for k in state if k not in checkpoint]
        if missing:
            raise KeyError(
                f"The requested state contains a key '{missing[0]}' that does not exist in the loaded "
                "checkpoint. To disable strict loading, set `strict=False`."
            )
    remainder = dict(checkpoint)
    for key, obj in list(state.items()):
        if key not in remainder:
            continue
        value = remainder.pop(key)
        if isinstance(obj, Module):
            strategy.load_module_state_dict(obj, value, strict=strict)
        elif isinstance(obj, (Optimizer, Stateful)):
            obj.load_state_dict(value)
        else:
            state[key] = value
    return remainder
