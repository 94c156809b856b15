"""The guard against a raw ``loss.backward()`` where ``fabric.backward`` must run instead.

Model outputs carry a tensor hook that refuses a backward not started by ``fabric.backward`` (Lightning's
rule): where the strategy or the precision overrides backward in its class, even where backward is plain
(``bf16-mixed``). :data:`backward_state` is the one process-wide record that ``fabric.backward`` is running.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from torch import Tensor

__all__ = ["BackwardState", "attach_backward_guard", "backward_state", "guard_raw_backward"]

_RAW_BACKWARD_MESSAGE: Final = (
    "The current strategy and precision selection requires you to call `fabric.backward(loss)` instead of"
    " `loss.backward()`."
)


class BackwardState:
    """Whether ``fabric.backward`` is running (the guard on model outputs reads it)."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


backward_state: Final = BackwardState()


def guard_raw_backward(grad: Tensor) -> None:
    """The guard on model outputs: only ``fabric.backward`` may run their backward."""
    if not backward_state.active:
        raise RuntimeError(_RAW_BACKWARD_MESSAGE)


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
