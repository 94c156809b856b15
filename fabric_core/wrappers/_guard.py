"""The guard against a raw ``loss.backward()`` where ``fabric.backward`` must run instead.

Model outputs carry a tensor hook that refuses a backward not started by ``fabric.backward`` (Lightning's
rule). :data:`backward_state` is the one process-wide record that ``fabric.backward`` is running, and which
strategies' training loops are known to call it.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from torch import Tensor

from fabric_core.strategies.strategy import Strategy

__all__ = ["BackwardState", "attach_backward_guard", "backward_state", "guard_raw_backward", "plain_guard"]

_RAW_BACKWARD_MESSAGE: Final = (
    "The current strategy and precision selection requires you to call `fabric.backward(loss)` instead of"
    " `loss.backward()`."
)


class BackwardState:
    """Whether ``fabric.backward`` is running (the guard on model outputs reads it), and whether it has run."""

    __slots__ = ("active", "used_by")

    def __init__(self) -> None:
        self.active = False
        #: Strategies whose ``fabric.backward`` has run: their training loop is known to call it.
        self.used_by: weakref.WeakSet[Strategy] = weakref.WeakSet()


backward_state: Final = BackwardState()


def guard_raw_backward(grad: Tensor) -> None:
    """The guard where backward differs (loss scaling, a strategy's backward): only `fabric.backward` may run it."""
    if not backward_state.active:
        raise RuntimeError(_RAW_BACKWARD_MESSAGE)


def plain_guard(strategy: Strategy) -> Callable[[Tensor], None]:
    """The guard where backward is plain but the API still refuses a raw one (Lightning's rule).

    It lets a raw backward through once ``fabric.backward`` has run for ``strategy``: the gradients are the
    same, and the guard only points out the mistake in a loop that never calls ``fabric.backward``. So,
    once announced, ``fabric.backward`` needs no bookkeeping around each step's backward.
    """

    def guard(grad: Tensor) -> None:
        if not backward_state.active and strategy not in backward_state.used_by:
            raise RuntimeError(_RAW_BACKWARD_MESSAGE)

    return guard


def attach_backward_guard(data: Any, guard: Callable[[Tensor], None]) -> None:
    """Hook every output tensor that requires grad, without rebuilding the output's containers."""
    if isinstance(data, Tensor):
        if data.requires_grad:
            data.register_hook(guard)  # type: ignore[no-untyped-call]
    elif isinstance(data, (list, tuple)):
        for item in data:
            attach_backward_guard(item, guard)
    elif isinstance(data, Mapping):
        for item in data.values():
            attach_backward_guard(item, guard)
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        for field in dataclasses.fields(data):
            attach_backward_guard(getattr(data, field.name), guard)
