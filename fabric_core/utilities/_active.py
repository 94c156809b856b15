"""The strategy of the Fabric that was built last, for helpers that are called without one.

``GatheredParameters`` and friends are called as free functions, the way DeepSpeed's and Accelerate's
users write them, so they need a way to find the strategy at work. ``Fabric`` registers its strategy
here when it is constructed. Only a weak reference is kept: a discarded Fabric must not keep its
strategy (and the model it holds) alive.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fabric_core.strategies.strategy import Strategy

__all__ = ["get_active_strategy", "set_active_strategy"]

_active: weakref.ref[Strategy] | None = None


def set_active_strategy(strategy: Strategy | None) -> None:
    """Make ``strategy`` the one free helpers delegate to; ``None`` clears it.

    Args:
        strategy: The strategy of the Fabric being constructed, or ``None``.
    """
    global _active
    _active = None if strategy is None else weakref.ref(strategy)


def get_active_strategy() -> Strategy | None:
    """Return the strategy registered last, or ``None`` if there is none (or it was discarded)."""
    return None if _active is None else _active()
