"""One process on one XLA device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fabric_core.io.checkpoint_io import CheckpointIO
from fabric_core.precision.precision import Precision
from fabric_core.strategies.single_device import SingleDeviceStrategy
from fabric_core.strategies.wiring import WIRING_ORDER, Wiring, wired
from fabric_core.utilities.rank_zero import rank_zero_deprecation
from fabric_core_xla import accelerator
from fabric_core_xla import device as xla_device
from fabric_core_xla.checkpoint_io import XLACheckpointIO
from fabric_core_xla.precision import XLAPrecision

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["SingleDeviceXLAStrategy", "SingleTPUStrategy"]

# Lightning's flag at its ``strategies.single_xla`` path (this module backs it), read here at call time.
_XLA_AVAILABLE = accelerator.XLA_AVAILABLE


class SingleDeviceXLAStrategy(SingleDeviceStrategy):
    """Runs in this process on one XLA device (``strategy="auto"`` with ``devices=1`` on a TPU).

    Args:
        device: The device: ``torch.device("xla", i)``, ``"xla:i"`` or the index ``i``; by default the one
            selection chose.
        **wiring: ``accelerator``, ``checkpoint_io`` (:class:`XLACheckpointIO` by default) and ``precision``
            (:class:`XLAPrecision` ``"32-true"`` by default); usually filled in by selection.

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    @wired(Wiring, positional=("device", *WIRING_ORDER))
    def __init__(self, device: torch.device | str | int | None = None, **wiring: Unpack[Wiring]) -> None:
        xla_device.require_torch_xla(type(self).__name__, _XLA_AVAILABLE)
        if isinstance(device, int) and not isinstance(device, bool):
            device = torch.device("xla", device)
        super().__init__(device=device, **wiring)

    @property
    def root_device(self) -> torch.device:
        return self._device if self._device is not None else torch.device("xla", 0)

    def default_checkpoint_io(self) -> CheckpointIO:
        """XLA tensors are saved through ``XLACheckpointIO`` (moved to the CPU, written by rank 0)."""
        return XLACheckpointIO()

    def default_precision(self) -> Precision:
        """The XLA precision plugin in full precision."""
        return XLAPrecision("32-true")


class SingleTPUStrategy(SingleDeviceXLAStrategy):
    """Deprecated (as in Lightning): use :class:`SingleDeviceXLAStrategy` (``strategy="single_xla"``)."""

    @wired(Wiring, positional=("device", *WIRING_ORDER))
    def __init__(self, device: torch.device | str | int | None = None, **wiring: Unpack[Wiring]) -> None:
        rank_zero_deprecation(
            "The 'single_tpu' strategy is deprecated. Use 'single_xla' instead "
            "(`fabric_core.strategies.SingleDeviceXLAStrategy`)."
        )
        super().__init__(device=device, **wiring)
