"""Type aliases and structural protocols: Lightning's ``utilities.types`` and fabric-core's shared ones.

The one home of the types that several layers share, so that none of them imports another for a type:
``PathLike`` and ``Stateful`` (checkpoint I/O, strategies, plugins), and the protocols a launcher and a
strategy see each other through (:class:`LaunchedStrategy`). Importing this module does not import torch:
the torch-bound aliases (``_DEVICE``, ``ReduceOp``, ...) are built on first access, so torch-free modules
(``io.atomic``, ``io.checkpoint_io``, ``launchers``) can use the rest.

The protocols are ``runtime_checkable``: ``isinstance(obj, Optimizable)`` checks that the methods exist
(not their signatures), which is how Lightning code uses them.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, TypeVar, overload, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch.distributed import ProcessGroup, ReduceOp
    from torch.nn import Module

    UntypedStorage: TypeAlias = torch.UntypedStorage
    _DEVICE: TypeAlias = torch.device | str | int
    _MAP_LOCATION_TYPE: TypeAlias = (
        _DEVICE | Callable[[UntypedStorage, str], UntypedStorage | None] | dict[_DEVICE, _DEVICE] | None
    )
    _PARAMETERS: TypeAlias = Iterator[torch.nn.Parameter]
    RedOpType: TypeAlias = ReduceOp.RedOpType

__all__ = [
    "_DEVICE",
    "_MAP_LOCATION_TYPE",
    "_PARAMETERS",
    "_PATH",
    "CollectibleGroup",
    "LRScheduler",
    "LaunchEnvironment",
    "LaunchedStrategy",
    "ModuleLoader",
    "Optimizable",
    "PathLike",
    "ProcessGroup",
    "RedOpType",
    "ReduceLROnPlateau",
    "ReduceOp",
    "Stateful",
    "Steppable",
    "UntypedStorage",
    "_Stateful",
]

#: A path as fabric-core's functions take it: a string or any ``os.PathLike`` (``pathlib.Path``).
PathLike: TypeAlias = str | os.PathLike[str]
_PATH: TypeAlias = str | Path  # Lightning's name
#: ``fabric.save``'s ``filter``: per top-level key of the state, a predicate on ``(name, value)`` that keeps an entry.
StateFilter: TypeAlias = Mapping[str, Callable[[str, Any], bool]]

#: The names above that need torch, built by ``__getattr__`` on first access.
_TORCH_NAMES: Final = frozenset(
    {"UntypedStorage", "_DEVICE", "_MAP_LOCATION_TYPE", "_PARAMETERS", "ProcessGroup", "ReduceOp", "RedOpType"}
)


def _torch_names() -> dict[str, Any]:
    import torch

    storage = torch.UntypedStorage
    device = torch.device | str | int
    names: dict[str, Any] = {
        "UntypedStorage": storage,
        "_DEVICE": device,
        "_MAP_LOCATION_TYPE": device | Callable[[storage, str], storage | None] | dict[device, device] | None,
        "_PARAMETERS": Iterator[torch.nn.Parameter],
    }
    if torch.distributed.is_available():
        from torch.distributed import ProcessGroup, ReduceOp

        names.update(ProcessGroup=ProcessGroup, ReduceOp=ReduceOp, RedOpType=ReduceOp.RedOpType)
    else:  # pragma: no cover - builds of torch without distributed support (some mobile/macOS builds)
        names.update(ProcessGroup=Any, ReduceOp=object, RedOpType=object)
    return names


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _TORCH_NAMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        names = _torch_names()
        globals().update(names)
        return names[name]


#: The key type of a state dict (Lightning's name for the type variable of ``_Stateful``).
_DictKey = TypeVar("_DictKey")


@runtime_checkable
class _Stateful(Protocol[_DictKey]):
    """Anything with ``state_dict()`` and ``load_state_dict()``: what ``fabric.save``/``load`` treat as stateful."""

    def state_dict(self) -> dict[_DictKey, Any]: ...

    def load_state_dict(self, state_dict: dict[_DictKey, Any]) -> None: ...


#: The name fabric-core uses (``isinstance(obj, Stateful)``; ``Stateful[str]`` in annotations).
Stateful = _Stateful


@runtime_checkable
class LaunchEnvironment(Protocol):
    """Where the processes a launcher starts meet: the address and port of the main process."""

    @property
    def main_address(self) -> str: ...

    @property
    def main_port(self) -> int: ...


class LaunchedStrategy(Protocol):
    """What a launcher needs of the strategy whose processes it starts (``ParallelStrategy`` is one).

    Launchers are typed against this instead of the strategy classes, which create them: the launcher layer
    sits below the strategies and never imports them.
    """

    @property
    def cluster_environment(self) -> LaunchEnvironment | None: ...

    @property
    def num_processes(self) -> int: ...

    def set_world_ranks(self) -> None:
        """Set this process's ranks from the environment (called in each started worker)."""


class ModuleLoader(Protocol):
    """Loads a state dict into a module its own way: what restoring a checkpoint needs of a strategy."""

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> None: ...


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
