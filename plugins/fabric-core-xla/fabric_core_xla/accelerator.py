"""The XLA accelerator: TPUs (and any PJRT device torch_xla drives)."""

from __future__ import annotations

import contextlib
from typing import Any, Final

import torch

from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.imports import RequirementCache
from fabric_core.utilities.rank_zero import rank_zero_deprecation
from fabric_core_xla import device

__all__ = ["XLA_AVAILABLE", "TPUAccelerator", "XLAAccelerator", "check_devices", "parse_devices_string", "using_pjrt"]

#: Whether torch_xla is installed, at 1.13 or later (PJRT, the only runtime supported); checked on first use,
#: nothing imported. Each module of this plugin at a Lightning path with an ``_XLA_AVAILABLE`` binds this object
#: under that name and reads its own binding at call time, so that a test patching one path (Lightning's
#: ``mock_xla_available`` patches all seven) is obeyed there; binding this name, never a patched one, leaves a
#: module imported during such a test unaffected once the patches are undone.
XLA_AVAILABLE: Final = RequirementCache("torch_xla>=1.13", "torch_xla")
# Lightning's flags at its ``accelerators.xla`` path (this module backs it).
_XLA_AVAILABLE = XLA_AVAILABLE
_XLA_GREATER_EQUAL_2_1: Final = RequirementCache("torch_xla>=2.1")
_XLA_GREATER_EQUAL_2_5: Final = RequirementCache("torch_xla>=2.5")


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
        device.require_torch_xla(type(self).__name__, _XLA_AVAILABLE)

    @staticmethod
    def parse_devices(devices: Any) -> int | list[int]:
        """Return ``1``, the device count, or ``[i]``.

        Raises:
            InvalidConfigError: A string that is no device count or indices, or any other value.
        """
        value: Any = parse_devices_string(devices) if isinstance(devices, str) else devices
        check_devices(value, given=devices)
        return list(value) if isinstance(value, (list, tuple)) else value

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
        """Whether torch_xla is installed and this host has an XLA device (the runtime is not started).

        Asks :meth:`auto_device_count` at call time, as Lightning's does, so that patching either answers here.
        """
        return XLAAccelerator.auto_device_count() > 0


def probe() -> bool:
    """The ``"tpu"`` entry's probe: asks the class at call time, so a patched ``XLAAccelerator.is_available``
    (Lightning's path ``accelerators.xla``, served by this module) answers for selection too."""
    return bool(XLAAccelerator.is_available())


class TPUAccelerator(XLAAccelerator):
    """Deprecated (as in Lightning): use :class:`XLAAccelerator`, which this is in every other respect."""

    def __init__(self) -> None:
        rank_zero_deprecation(
            "The `TPUAccelerator` class is deprecated. Use `fabric_core.accelerators.XLAAccelerator` instead."
        )
        super().__init__()


def using_pjrt() -> bool:
    """Whether torch_xla runs on its PJRT runtime (the only one since torch_xla 2.2; imports torch_xla).

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """
    device.require_torch_xla("using_pjrt", device.xla_installed())  # as Lightning: the import decides
    if _XLA_GREATER_EQUAL_2_5:  # `using_pjrt` is gone: a configured device type means PJRT
        from torch_xla import runtime

        return runtime.device_type() is not None
    if _XLA_GREATER_EQUAL_2_1:
        from torch_xla import runtime

        return bool(runtime.using_pjrt())
    from torch_xla.experimental import pjrt

    return bool(pjrt.using_pjrt())


def parse_devices_string(devices: str) -> int | list[int]:
    """``"8"`` is ``8``; ``"2,"`` or ``"0,1"`` is a list of indices (empty parts skipped).

    Raises:
        InvalidConfigError: Neither an int nor comma-separated ints (also a ``ValueError``).
    """
    text = devices.strip()
    with contextlib.suppress(ValueError):
        return int(text)
    try:
        return [int(part) for part in text.split(",") if part]
    except ValueError:
        raise InvalidConfigError(
            f"Could not parse the selected TPU devices: {devices!r}. `Fabric(devices=...)` takes 'auto', the "
            "device count (an int, or a string such as '8') or one device index ('3,' or [3]).",
            argument="devices",
            value=devices,
        ) from None


def check_devices(devices: object, given: object = None) -> None:
    """Accept ``1``, the device count, or ``[i]`` for a device index ``i`` of this host.

    Args:
        devices: The devices, parsed from a string if one was given.
        given: What the user passed, for the message (``devices`` if not given).

    Raises:
        InvalidConfigError: Any other value (also a ``ValueError``).
    """
    count = XLAAccelerator.auto_device_count()
    index_type = isinstance(devices, (list, tuple)) and len(devices) == 1 and type(devices[0]) is int
    if (type(devices) is int and devices in {1, count}) or (index_type and 0 <= devices[0] < count):  # type: ignore[index]
        return
    shown = devices if given is None else given
    raise InvalidConfigError(
        f"`Fabric(devices={shown!r})`: `devices` can only be 'auto', 1, {count} or [<0-{max(count - 1, 0)}>] "
        f"for TPUs (this host has {count} XLA device(s)).",
        argument="devices",
        value=shown,
    )


def _parse_tpu_devices(devices: int | str | list[int]) -> int | list[int]:
    """Lightning's parser of TPU ``devices``: :meth:`XLAAccelerator.parse_devices` after a check of the type.

    Raises:
        TypeError: ``devices`` is not an int, a string or a sequence of ints.
        InvalidConfigError: A value of the right type but not a valid choice (also a ``ValueError``).
    """
    ints = isinstance(devices, (list, tuple)) and all(type(d) is int for d in devices)
    if not (type(devices) in (int, str) or ints):
        raise TypeError(f"TPU devices must be an int, a string or a sequence of ints, but you passed {devices!r}.")
    return XLAAccelerator.parse_devices(devices)


# Lightning's names for the helpers above.
_using_pjrt: Final = using_pjrt
_parse_tpu_devices_str: Final = parse_devices_string
_check_tpu_devices_valid: Final = check_devices
