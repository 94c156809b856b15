"""Type aliases and structural protocols users annotate with (Lightning's ``utilities.types``).

The protocols are ``runtime_checkable``: ``isinstance(obj, Optimizable)`` checks that the methods exist
(not their signatures), which is how Lightning code uses them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeVar, overload, runtime_checkable

import torch
from torch import Tensor

__all__ = [
    "_DEVICE",
    "_MAP_LOCATION_TYPE",
    "_PARAMETERS",
    "_PATH",
    "CollectibleGroup",
    "LRScheduler",
    "Optimizable",
    "ProcessGroup",
    "RedOpType",
    "ReduceLROnPlateau",
    "ReduceOp",
    "Steppable",
    "UntypedStorage",
    "_Stateful",
]

UntypedStorage: TypeAlias = torch.UntypedStorage
_PATH: TypeAlias = str | Path
_DEVICE: TypeAlias = torch.device | str | int
_MAP_LOCATION_TYPE: TypeAlias = (
    _DEVICE | Callable[[UntypedStorage, str], UntypedStorage | None] | dict[_DEVICE, _DEVICE] | None
)
_PARAMETERS: TypeAlias = Iterator[torch.nn.Parameter]
if torch.distributed.is_available():
    from torch.distributed import ProcessGroup, ReduceOp

    RedOpType: TypeAlias = ReduceOp.RedOpType
else:  # pragma: no cover - builds of torch without distributed support (some mobile/macOS builds)
    ProcessGroup = Any  # type: ignore[assignment,misc]
    ReduceOp = RedOpType = object  # type: ignore[assignment,misc]

_Key = TypeVar("_Key")


@runtime_checkable
class _Stateful(Protocol[_Key]):
    """Anything with ``state_dict()`` and ``load_state_dict()``: what ``fabric.save``/``load`` treat as stateful."""

    def state_dict(self) -> dict[_Key, Any]: ...

    def load_state_dict(self, state_dict: dict[_Key, Any]) -> None: ...


@runtime_checkable
class CollectibleGroup(Protocol):
    """A process group as collectives see it: its size and this process's rank in it."""

    def size(self) -> int: ...

    def rank(self) -> int: ...


@runtime_checkable
class Steppable(Protocol):
    """Anything with an optimizer-style ``step(closure=None)``."""

    @overload
    def step(self, closure: None = ...) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = ...) -> float | None: ...


@runtime_checkable
class Optimizable(Steppable, Protocol):
    """An optimizer, structurally: parameter groups, defaults, per-parameter state, and its state dict."""

    param_groups: list[dict[Any, Any]]
    defaults: dict[Any, Any]
    state: defaultdict[Tensor, Any]

    def state_dict(self) -> dict[str, dict[Any, Any]]: ...

    def load_state_dict(self, state_dict: dict[str, dict[Any, Any]]) -> None: ...


@runtime_checkable
class LRScheduler(_Stateful[str], Protocol):
    """A learning-rate scheduler, structurally: its optimizer, base rates, and ``step``."""

    optimizer: Optimizable
    base_lrs: list[float]

    def __init__(self, optimizer: Optimizable, *args: Any, **kwargs: Any) -> None: ...

    def step(self, epoch: int | None = None) -> None: ...


@runtime_checkable
class ReduceLROnPlateau(_Stateful[str], Protocol):
    """``torch.optim.lr_scheduler.ReduceLROnPlateau``, structurally: ``step`` takes the monitored metric."""

    cooldown_counter: int
    in_cooldown: bool
    optimizer: Optimizable

    def __init__(
        self,
        optimizer: Optimizable,
        mode: str = ...,
        factor: float = ...,
        patience: int = ...,
        threshold: float = ...,
        threshold_mode: str = ...,
        cooldown: int = ...,
        min_lr: float = ...,
        eps: float = ...,
    ) -> None: ...

    def step(self, metrics: float | int | Tensor, epoch: int | None = None) -> None: ...
