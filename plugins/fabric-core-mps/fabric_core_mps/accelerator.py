"""The MPS accelerator: the GPU of Apple silicon Macs."""

from __future__ import annotations

from typing import Any, Final

import torch

from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.utilities.device_parser import parse_device_ids
from fabric_core_mps import device

__all__ = ["MPSAccelerator", "available_device_indices"]


class MPSAccelerator(Accelerator):
    """Runs on the one GPU of an Apple silicon Mac (``devices=1``, ``-1``, ``"0"``, ``[0]`` or ``"auto"``).

    Only single-process strategies work: torch has no process-group backend for MPS.
    """

    device_type = "mps"

    def setup_device(self, device: torch.device) -> None:
        """Check that ``device`` is the MPS device (there is nothing to select: a Mac has one).

        Raises:
            InvalidConfigError: ``device`` is not an MPS device.
        """
        self._check_device_type(device)

    def teardown(self) -> None:
        """Give the memory cached by torch's MPS allocator back to the system."""
        if device.is_available():
            torch.mps.empty_cache()

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        """Return the device indices ``devices`` asks for: only ``[0]`` exists.

        Raises:
            InvalidConfigError: An unknown form, ``0``, or more than the one device.
        """
        return parse_device_ids(devices, available_device_indices(), accelerator="mps")

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """``[mps:0]``."""
        return [torch.device("mps", index) for index in range(len(MPSAccelerator.parse_devices(devices)))]

    @staticmethod
    def auto_device_count() -> int:
        """A Mac has one MPS device."""
        return 1

    @staticmethod
    def is_available() -> bool:
        """Whether this is an Apple silicon Mac whose torch supports MPS (and ``DISABLE_MPS`` is not 1)."""
        return device.is_available()


def probe() -> bool:
    """The ``"mps"`` entry's probe: asks the class at call time, so a patched ``MPSAccelerator.is_available``
    (Lightning's path ``accelerators.mps``, served by this module) answers for selection too."""
    return bool(MPSAccelerator.is_available())


def available_device_indices() -> list[int]:
    """``[0]`` where MPS can be used (a Mac has one MPS device), else ``[]``."""
    return [0] if MPSAccelerator.is_available() else []


#: Lightning's name at its ``accelerators.mps`` path, which this module backs.
_get_all_available_mps_gpus: Final = available_device_indices
