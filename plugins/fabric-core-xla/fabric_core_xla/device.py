"""Whether torch_xla is installed and how many XLA devices this host has, without starting the runtime.

torch_xla refuses to spawn processes once its runtime is initialised in the parent ("Do not use the XLA
device before calling xmp.spawn"), so nothing here touches the runtime: devices are counted from the
environment (``PJRT_DEVICE=CPU``) or from the PCI bus (TPU chips). :func:`num_xla_devices` is the one
function tests patch to pretend a machine has TPUs.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    import torch

__all__ = ["INSTALL_HINT", "current_device", "is_available", "num_xla_devices", "require_torch_xla", "xla_installed"]

INSTALL_HINT: Final = (
    "Run `pip install torch_xla` with the version that matches your torch (torch_xla 2.9 needs torch 2.9; "
    "see https://github.com/pytorch/xla#installation), and set `PJRT_DEVICE` (TPU, or CPU to try it out)."
)


def xla_installed() -> bool:
    """Return whether ``torch_xla`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec("torch_xla") is not None
    except (ImportError, ValueError):
        return False


def require_torch_xla(what: str, available: object) -> ModuleType:
    """Import and return ``torch_xla``, or explain how to install it.

    Args:
        what: Who needs it, for the message (``"XLAStrategy"``).
        available: Whether torch_xla is installed: the ``_XLA_AVAILABLE`` flag of the caller's module, read
            there at call time, as Lightning's code reads it (its tests set it to pretend torch_xla exists).

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
        ImportError: torch_xla is installed but does not import, typically a torch version mismatch.
    """
    if not available:
        raise ModuleNotFoundError(f"`{what}` needs torch_xla, which is not installed. {INSTALL_HINT}", name="torch_xla")
    try:
        import torch_xla
    except ImportError as err:
        import torch

        raise ImportError(
            f"`{what}` needs torch_xla, which is installed but failed to import with torch {torch.__version__}: "
            f"{err}. {INSTALL_HINT}"
        ) from err
    return cast(ModuleType, torch_xla)


def num_xla_devices() -> int:
    """Return the number of XLA devices on this host (0 when torch_xla is missing). Never raises.

    ``PJRT_DEVICE=CPU`` gives ``CPU_NUM_DEVICES`` (default 1) CPU devices; ``PJRT_DEVICE=CUDA`` (or ``GPU``)
    gives ``GPU_NUM_DEVICES``; unset or ``TPU`` counts the TPU chips on the PCI bus (times two logical
    cores per chip on TPU v2/v3). Nothing here starts the XLA runtime.
    """
    if not xla_installed():
        return 0
    kind = os.environ.get("PJRT_DEVICE", "").strip().upper()
    try:
        if kind == "CPU":
            return max(int(os.environ.get("CPU_NUM_DEVICES", "1")), 0)
        if kind in ("CUDA", "GPU"):
            return max(int(os.environ.get("GPU_NUM_DEVICES", "0")), 0)
        if kind not in ("", "TPU"):
            return 0
        from torch_xla._internal import tpu

        # Counting chips reads /sys only; asking for the TPU version may query the metadata server.
        if tpu.num_available_chips() == 0:
            return 0
        return int(tpu.num_available_devices())
    except Exception:
        return 0


def is_available() -> bool:
    """Return whether this host has an XLA device, asked without importing torch. Never raises."""
    return num_xla_devices() > 0


def current_device() -> torch.device:
    """Return this process's XLA device (starting the XLA runtime if it is not running yet).

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """
    torch_xla = require_torch_xla("the XLA device", xla_installed())
    get_device = getattr(torch_xla, "device", None)
    if callable(get_device):  # torch_xla >= 2.7; `xm.xla_device()` warns there
        found: torch.device = get_device()
        return found
    import torch_xla.core.xla_model as xm

    older: torch.device = xm.xla_device()
    return older
