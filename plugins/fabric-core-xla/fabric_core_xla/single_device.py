"""One process on one XLA device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fabric_core.io.checkpoint_io import CheckpointIO
from fabric_core.precision.precision import Precision
from fabric_core.strategies.single_device import SingleDeviceStrategy
from fabric_core.utilities.rank_zero import rank_zero_deprecation
from fabric_core_xla import device as xla_device
from fabric_core_xla.checkpoint_io import XLACheckpointIO
from fabric_core_xla.precision import XLAPrecision

if TYPE_CHECKING:
    from fabric_core.accelerators.accelerator import Accelerator

__all__ = ["SingleDeviceXLAStrategy", "SingleTPUStrategy"]


class SingleDeviceXLAStrategy(SingleDeviceStrategy):
    """Runs in this process on one XLA device (``strategy="auto"`` with ``devices=1`` on a TPU).

    Args:
        device: The device: ``torch.device("xla", i)``, ``"xla:i"`` or the index ``i``; by default the one
            selection chose.
        accelerator: The accelerator; usually filled in by selection.
        checkpoint_io: How checkpoints are written (:class:`XLACheckpointIO` by default).
        precision: The precision plugin (:class:`XLAPrecision` ``"32-true"`` by default).

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision: Precision | None = None,
    ) -> None:
        xla_device.require_torch_xla(type(self).__name__)
        if isinstance(device, int) and not isinstance(device, bool):
            device = torch.device("xla", device)
        super().__init__(device=device, accelerator=accelerator, checkpoint_io=checkpoint_io, precision=precision)

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

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision: Precision | None = None,
    ) -> None:
        rank_zero_deprecation(
            "The `SingleTPUStrategy` class is deprecated. Use `fabric_core.strategies.SingleDeviceXLAStrategy` "
            "(strategy 'single_xla') instead."
        )
        super().__init__(device=device, accelerator=accelerator, checkpoint_io=checkpoint_io, precision=precision)
