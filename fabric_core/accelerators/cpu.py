"""The CPU accelerator."""

from __future__ import annotations

from typing import Any

import torch

from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.errors import InvalidConfigError

__all__ = ["CPUAccelerator"]


class CPUAccelerator(Accelerator):
    """Runs on the CPU; ``devices=N`` means N processes (each on the CPU)."""

    device_type = "cpu"
    process_group_backend = "gloo"

    def setup_device(self, device: torch.device) -> None:
        if device.type != "cpu":
            raise InvalidConfigError(f"Device should be CPU, got {device} instead.", argument="devices", value=device)

    @staticmethod
    def parse_devices(devices: Any) -> int:
        """Accept an int > 0 or a string of digits.

        Raises:
            InvalidConfigError: Anything else (lists and ``-1`` are GPU forms and are rejected on CPU).
        """
        if isinstance(devices, str) and devices.strip().isdigit():
            devices = int(devices)
        if isinstance(devices, bool) or not isinstance(devices, int) or devices <= 0:
            raise InvalidConfigError(
                f"`Fabric(devices={devices!r})`: `devices` selected with `CPUAccelerator` should be an int > 0.",
                argument="devices",
                value=devices,
            )
        return devices

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device("cpu")] * CPUAccelerator.parse_devices(devices)

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True
