"""The CPU accelerator."""

from __future__ import annotations

import os
from typing import Any, Final

import torch

from fabric_core._deferred import lightning_reexports
from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.errors import ArgumentTypeError, InvalidConfigError

__all__ = ["CORES_FACTOR", "MIN_CEILING", "CPUAccelerator", "max_cpu_processes"]

#: Processes per usable core that ``devices=N`` may start on the cpu accelerator (Lightning allows more
#: processes than cores, useful to test multi-process code on a laptop; beyond a few per core there is no
#: gain, and a count like ``10**9`` would allocate gigabytes before failing).
CORES_FACTOR: Final = 4
#: The ceiling on any machine, however few cores it has.
MIN_CEILING: Final = 64


def _cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def max_cpu_processes() -> int:
    """The most processes per node ``Fabric(accelerator="cpu", devices=N)`` accepts."""
    return max(MIN_CEILING, CORES_FACTOR * _cores())


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
            ArgumentTypeError: Anything else (lists and ``-1`` are GPU forms and are rejected on CPU).
            InvalidConfigError: More processes than this machine's ceiling.
        """
        if isinstance(devices, str) and devices.strip().isdigit():
            devices = int(devices)
        if isinstance(devices, bool) or not isinstance(devices, int) or devices <= 0:
            # A TypeError too, as Lightning raises here, so that `except TypeError` keeps working.
            raise ArgumentTypeError(
                f"`Fabric(devices={devices!r})`: `devices` selected with `CPUAccelerator` should be an int > 0.",
                argument="devices",
                value=devices,
            )
        ceiling = max_cpu_processes()
        if devices > ceiling:
            raise InvalidConfigError(
                f"`Fabric(devices={devices!r})`: on the cpu accelerator each device is one process, and at most "
                f"{ceiling} processes per node are allowed here ({CORES_FACTOR} per CPU core of the {_cores()} "
                f"this process may use, and never fewer than {MIN_CEILING}). More only time-slice the same cores, "
                "while each one loads its own Python and torch. Pass a smaller `devices`, or use more nodes.",
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

# Lightning's private name for the parsing above.
_parse_cpu_cores = CPUAccelerator.parse_devices

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
