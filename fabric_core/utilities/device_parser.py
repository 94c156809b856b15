"""Parse ``Fabric(devices=...)`` into device indices, for accelerators whose devices are numbered.

Shared by every accelerator that addresses devices by index (cuda, mps, and out-of-tree ones), so that
``devices=2``, ``devices=-1``, ``devices="0,1"`` and ``devices=[0, 1]`` mean the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fabric_core.errors import InvalidConfigError

__all__ = ["parse_device_ids"]

_FORMS = "an int N > 0 (the first N devices), -1 (all of them), a string such as '0,1', or a list of ints"


def parse_device_ids(devices: Any, available: Sequence[int], *, accelerator: str) -> list[int]:
    """Turn ``devices`` into the list of device indices to use.

    Accepted forms: an int ``N > 0`` (indices ``0..N-1``), ``-1`` or ``"-1"`` (every available device),
    a string of comma-separated indices (``"0,1"``; ``"1"`` alone means one device, like ``1``), and a
    list or tuple of ints (``[0, 2]``).

    Args:
        devices: The value passed as ``Fabric(devices=...)`` (never ``"auto"``).
        available: The indices of the devices this machine has.
        accelerator: The accelerator's name, for messages (``"cuda"``).

    Returns:
        The requested indices, in the order given.

    Raises:
        InvalidConfigError: A value of another type or form, ``0`` or an empty list, duplicate indices,
            no device available, or an index the machine does not have.
    """
    ids = _requested_ids(devices, available, accelerator)
    if not ids:
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})`: GPUs requested but none are available. This machine has no "
            f"{accelerator} device; use `Fabric(accelerator='cpu')`, or run on a machine with one.",
            argument="devices",
            value=devices,
        )
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})`: device IDs must be unique, but {duplicates} appear more than once.",
            argument="devices",
            value=devices,
        )
    missing = [i for i in ids if i not in available]
    if missing:
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})`: you requested {accelerator} device(s) {ids}, but your machine only "
            f"has: {list(available)}. Valid choices: indices from {list(available)}, an int up to "
            f"{len(available)}, or -1 for all of them.",
            argument="devices",
            value=devices,
        )
    return ids


def _requested_ids(devices: Any, available: Sequence[int], accelerator: str) -> list[int]:
    value = _from_string(devices) if isinstance(devices, str) else devices
    if isinstance(value, (list, tuple)):
        wrong = [d for d in value if isinstance(d, bool) or not isinstance(d, int)]
        if wrong:
            raise InvalidConfigError(
                f"`Fabric(devices={devices!r})`: device IDs must be an int, a string, or a sequence of ints, "
                f"but you passed a sequence containing {type(wrong[0]).__name__} ({wrong[0]!r}).",
                argument="devices",
                value=devices,
            )
        if not value:
            raise _not_valid(devices, accelerator)
        return list(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})`: device IDs must be an int, a string, or a sequence of ints, but "
            f"you passed a {type(devices).__name__}. Valid forms: {_FORMS}.",
            argument="devices",
            value=devices,
        )
    if value == -1:
        return list(available)
    if value == 0:
        raise _not_valid(devices, accelerator)
    if value < 0:
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})` is not a valid number of {accelerator} devices. Valid forms: {_FORMS}.",
            argument="devices",
            value=devices,
        )
    if value > len(available):
        # Refused before building the indices: `devices=10**9` must not allocate a list of a billion first.
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})`: you requested {accelerator} device(s) "
            f"{list(range(value)) if value <= 16 else f'[0, 1, ..., {value - 1}]'}, but your machine only has: "
            f"{list(available)}. Valid choices: indices from {list(available)}, an int up to {len(available)}, or "
            "-1 for all of them.",
            argument="devices",
            value=devices,
        )
    return list(range(value))


def _from_string(devices: str) -> int | list[int]:
    text = devices.strip()
    try:
        if "," in text:
            return [int(part) for part in text.split(",") if part.strip()]
        return int(text)
    except ValueError:
        raise InvalidConfigError(
            f"`Fabric(devices={devices!r})` is not a valid device string. Valid forms: {_FORMS}.",
            argument="devices",
            value=devices,
        ) from None


def _not_valid(devices: Any, accelerator: str) -> InvalidConfigError:
    return InvalidConfigError(
        f"`Fabric(devices={devices!r})` value is not a valid input using {accelerator} accelerator. "
        f"Valid forms: {_FORMS}.",
        argument="devices",
        value=devices,
    )
