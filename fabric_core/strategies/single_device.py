"""One process, one device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch

from fabric_core._deferred import lightning_reexports
from fabric_core.strategies.strategy import Strategy
from fabric_core.strategies.wiring import WIRING_ORDER, Placement, Wiring, wired

if TYPE_CHECKING:
    from torch import Tensor
    from typing_extensions import Unpack

__all__ = ["SingleDeviceStrategy"]


class SingleDeviceStrategy(Strategy):
    """Runs everything in this process on one device; collectives are the identity."""

    backward_sync_is_noop: ClassVar[bool] = True  # nothing to synchronise

    @wired(Wiring, positional=("device", *WIRING_ORDER))
    def __init__(self, device: torch.device | str | int | None = None, **wiring: Unpack[Wiring]) -> None:
        super().__init__(**wiring)
        self._device = torch.device(device) if device is not None else None

    # Lightning's signatures: extra arguments are accepted and ignored (one process has nothing to wait for
    # or reduce). The identity stays a bare return: all_reduce is on the per-step path.
    def all_reduce(self, tensor: Tensor | Any, *args: Any, **kwargs: Any) -> Tensor | Any:
        return tensor

    def barrier(self, name: str | None = None, *args: Any, **kwargs: Any) -> None:
        return None

    def place(self, placement: Placement) -> None:
        """Run on the first device selection chose, unless the constructor was given one."""
        if self._device is None and placement.parallel_devices:
            self._device = placement.parallel_devices[0]

    @property
    def root_device(self) -> torch.device:
        return self._device if self._device is not None else torch.device("cpu")

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
