"""The XLA accelerator: TPUs (and any PJRT device torch_xla drives)."""

from __future__ import annotations

from typing import Any

import torch

from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.rank_zero import rank_zero_deprecation
from fabric_core_xla import device

__all__ = ["TPUAccelerator", "XLAAccelerator"]


class XLAAccelerator(Accelerator):
    """Runs on the XLA devices of this host, through torch_xla's PJRT runtime.

    ``devices`` is ``"auto"`` or the device count (every device: one process each, strategy ``"xla"``),
    ``1`` (one process), or ``[i]`` (one process on device ``i``).

    Raises:
        ModuleNotFoundError: When built without torch_xla installed (with the install command).
    """

    device_type = "xla"
    process_group_backend = "xla"

    def __init__(self) -> None:
        device.require_torch_xla(type(self).__name__)

    @staticmethod
    def parse_devices(devices: Any) -> int | list[int]:
        """Return ``1``, the device count, or ``[i]``.

        Raises:
            InvalidConfigError: Any other value.
        """
        count = device.num_xla_devices()
        value: Any = devices
        if isinstance(devices, str):
            text = devices.strip()
            try:
                value = int(text) if "," not in text else [int(p) for p in text.split(",") if p.strip()]
            except ValueError:
                value = devices
        valid_count = isinstance(value, int) and not isinstance(value, bool) and value in {1, count}
        valid_index = (
            isinstance(value, (list, tuple))
            and len(value) == 1
            and isinstance(value[0], int)
            and not isinstance(value[0], bool)
            and 0 <= value[0] < count
        )
        if valid_count or valid_index:
            return list(value) if isinstance(value, (list, tuple)) else value
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})`: `devices` can only be 'auto', 1, {count} or [<0-{max(count - 1, 0)}>] "
            f"for TPUs (this host has {count} XLA device(s)).",
            argument="devices",
            value=devices,
        )

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """``xla:0 .. xla:N-1`` for a count, ``[xla:i]`` for ``[i]``.

        These are plain ``torch.device`` objects; no XLA device is touched before the processes exist.
        """
        parsed = XLAAccelerator.parse_devices(devices)
        if isinstance(parsed, list):
            return [torch.device("xla", parsed[0])]
        return [torch.device("xla", index) for index in range(parsed)]

    @staticmethod
    def auto_device_count() -> int:
        """Every XLA device of this host."""
        return device.num_xla_devices()

    @staticmethod
    def is_available() -> bool:
        """Whether torch_xla is installed and this host has an XLA device (the runtime is not started)."""
        return device.is_available()


class TPUAccelerator(XLAAccelerator):
    """Deprecated (as in Lightning): use :class:`XLAAccelerator`, which this is in every other respect."""

    def __init__(self) -> None:
        rank_zero_deprecation(
            "The `TPUAccelerator` class is deprecated. Use `fabric_core.accelerators.XLAAccelerator` instead."
        )
        super().__init__()
