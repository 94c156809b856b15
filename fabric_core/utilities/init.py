"""Module-initialisation helpers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch.overrides import TorchFunctionMode

__all__ = ["EmptyInit"]


class EmptyInit(TorchFunctionMode):
    """Skip every ``torch.nn.init`` call inside the block: parameters keep uninitialised memory.

    Used by ``fabric.init_module(empty_init=True)`` when weights will be loaded from a checkpoint anyway:
    creating the model is faster and draws no random numbers.
    """

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.enabled and getattr(func, "__module__", None) == "torch.nn.init":
            if "tensor" in kwargs:
                return kwargs["tensor"]
            return args[0]
        return func(*args, **kwargs)
