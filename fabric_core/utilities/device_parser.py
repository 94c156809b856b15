"""Parse ``Fabric(devices=...)`` into device indices, for accelerators whose devices are numbered.

Shared by every accelerator that addresses devices by index (cuda, mps, and out-of-tree ones), so that
``devices=2``, ``devices=-1``, ``devices="0,1"`` and ``devices=[0, 1]`` mean the same everywhere.
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from typing import Any

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import ArgumentTypeError, InvalidConfigError

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
        ArgumentTypeError: A value of another type (also a ``TypeError``, as Lightning raises).
        InvalidConfigError: A string of another form, ``0`` or an empty list, duplicate indices, no device
            available, or an index the machine does not have.
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
            raise ArgumentTypeError(
                f"`Fabric(devices={devices!r})`: device IDs must be an int, a string, a sequence of ints, but you "
                f"passed a sequence containing {type(wrong[0]).__name__} ({wrong[0]!r}). Valid forms: {_FORMS}.",
                argument="devices",
                value=devices,
            )
        if not value:
            raise _not_valid(devices, accelerator)
        return list(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(
            f"`Fabric(devices={devices!r})`: device IDs must be an int, a string, a sequence of ints, but you "
            f"passed a {type(devices).__name__}. Valid forms: {_FORMS}.",
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


# -- Lightning's private parsing steps, as ``lightning.pytorch`` calls them: ``None`` means "no GPU" ----------


def _determine_root_gpu_device(gpus: list[Any] | None) -> Any:
    """The first of ``gpus`` (the root device), ``None`` for ``None``.

    Raises:
        TypeError: ``gpus`` is not a list.
        AssertionError: ``gpus`` is empty.
    """
    if gpus is None:
        return None
    if not isinstance(gpus, list):
        raise TypeError("GPUs should be a list")
    assert len(gpus) > 0, "GPUs should be a non-empty list"
    return gpus[0]


def _parse_gpu_ids(
    gpus: int | str | list[int] | None, include_cuda: bool = False, include_mps: bool = False
) -> list[int] | None:
    """The GPU indices ``gpus`` asks for, among the CUDA and/or MPS devices; ``None`` where it asks for none.

    ``0``, ``"0"`` and ``"[]"`` ask for none; ``-1``/``"-1"`` for all; ``N`` for the first ``N``; a list or a
    ``"0,1"`` string for those indices.

    Raises:
        TypeError: ``gpus`` is of another type (see :func:`_check_data_type`).
        MisconfigurationException: No GPU is available, an index is repeated or not available.
    """
    from fabric_core.utilities.exceptions import MisconfigurationException

    _check_data_type(gpus)
    if gpus is None or (isinstance(gpus, int) and gpus == 0) or str(gpus).strip() in ("0", "[]"):
        return None
    ids = _normalize_parse_gpu_input_to_list(
        _normalize_parse_gpu_string_input(gpus), include_cuda=include_cuda, include_mps=include_mps
    )
    if not ids:
        raise MisconfigurationException("GPUs requested but none are available.")
    import torch.distributed

    if (
        torch.distributed.is_available()
        and torch.distributed.is_torchelastic_launched()
        and len(ids) != 1
        and len(_get_all_available_gpus(include_cuda=include_cuda, include_mps=include_mps)) == 1
    ):
        # torchelastic shows each process one device: the indices are the job's, not this process's.
        return ids
    _check_unique(ids)
    return _sanitize_gpu_ids(ids, include_cuda=include_cuda, include_mps=include_mps)


def _normalize_parse_gpu_string_input(s: int | str | list[int]) -> int | list[int]:
    """A string of indices as an int or a list (``"-1"`` → ``-1``, ``"0,1"`` → ``[0, 1]``); others unchanged.

    Raises:
        ValueError: A string that is not a comma-separated list of ints.
    """
    return _from_string(s) if isinstance(s, str) else s


def _sanitize_gpu_ids(gpus: list[int], include_cuda: bool = False, include_mps: bool = False) -> list[int]:
    """``gpus`` unchanged, once each index is found among the available devices.

    Raises:
        ValueError: Neither ``include_cuda`` nor ``include_mps``.
        MisconfigurationException: An index this machine does not have.
    """
    from fabric_core.utilities.exceptions import MisconfigurationException

    if not (include_cuda or include_mps):
        raise ValueError("At least one gpu type should be specified!")
    available = _get_all_available_gpus(include_cuda=include_cuda, include_mps=include_mps)
    if any(gpu not in available for gpu in gpus):
        raise MisconfigurationException(f"You requested gpu: {gpus}\n But your machine only has: {available}")
    return gpus


def _normalize_parse_gpu_input_to_list(
    gpus: int | list[int] | tuple[int, ...], include_cuda: bool, include_mps: bool
) -> list[int] | None:
    """A sequence as a list, ``-1`` as every available index, ``N`` as ``[0..N-1]``, ``0`` as ``None``."""
    assert gpus is not None
    if isinstance(gpus, (MutableSequence, tuple)):
        return list(gpus)
    if not gpus:
        return None
    if gpus == -1:
        return _get_all_available_gpus(include_cuda=include_cuda, include_mps=include_mps)
    return list(range(gpus))


def _get_all_available_gpus(include_cuda: bool = False, include_mps: bool = False) -> list[int]:
    """The indices of the visible CUDA devices and/or of the MPS device (``[0]`` where there is one)."""
    cuda = _lightning_path("accelerators.cuda")._get_all_visible_cuda_devices() if include_cuda else []
    mps = _lightning_path("accelerators.mps")._get_all_available_mps_gpus() if include_mps else []
    return [*cuda, *mps]


def _lightning_path(path: str) -> Any:
    """The module at Lightning's path ``path`` under fabric_core: a plugin's, or its absent stand-in.

    Device counts are asked there, by name at call time, as Lightning asks its own modules: so a patched
    ``accelerators.cuda.num_cuda_devices`` or ``MPSAccelerator.is_available`` answers here too. The path is
    a string because the module comes from whichever plugin provides it
    (:mod:`fabric_core._lightning.paths.plugin_modules`).
    """
    import importlib

    return importlib.import_module(f"fabric_core.{path}")


def _check_unique(device_ids: list[int]) -> None:
    """Refuse a repeated index.

    Raises:
        MisconfigurationException: An index appears twice.
    """
    from fabric_core.utilities.exceptions import MisconfigurationException

    if len(device_ids) != len(set(device_ids)):
        raise MisconfigurationException("Device ID's (GPU) must be unique.")


def _check_data_type(device_ids: object) -> None:
    """Refuse device ids that are not an int, a string, or a list or tuple of ints (``True`` is no int here).

    Raises:
        TypeError: ``None`` or another type, named.
    """
    msg = "Device IDs (GPU/TPU) must be an int, a string, a sequence of ints, but you passed"
    if device_ids is None:
        raise TypeError(f"{msg} None")
    if isinstance(device_ids, (MutableSequence, tuple)):
        for item in device_ids:
            if type(item) is not int:
                raise TypeError(f"{msg} a sequence of {type(item).__name__}.")
    elif type(device_ids) not in (int, str):
        raise TypeError(f"{msg} {device_ids!r}.")


def _select_auto_accelerator() -> str:
    """The accelerator name ``"auto"`` stands for on this machine: ``"tpu"``, ``"mps"``, ``"cuda"`` or ``"cpu"``."""
    for name, path, cls in (
        ("tpu", "accelerators.xla", "XLAAccelerator"),
        ("mps", "accelerators.mps", "MPSAccelerator"),
        ("cuda", "accelerators.cuda", "CUDAAccelerator"),
    ):
        if getattr(_lightning_path(path), cls).is_available():
            return name
    return "cpu"


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
