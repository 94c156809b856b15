"""Checkpoints of XLA tensors: copied to the CPU, then written by global rank 0 only."""

from __future__ import annotations

import logging
from typing import Any

from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.utilities.apply_func import move_data_to_device
from fabric_core.utilities.types import PathLike
from fabric_core_xla import accelerator, device

__all__ = ["XLACheckpointIO"]

log = logging.getLogger(__name__)
# Lightning's flag at its ``plugins.io.xla`` path (this module backs it), read here at call time.
_XLA_AVAILABLE = accelerator.XLA_AVAILABLE


class XLACheckpointIO(TorchCheckpointIO):
    """Saves like ``xm.save(..., master_only=True, global_master=True)``, but atomically.

    Every process may call :meth:`save_checkpoint`; the global master (ordinal 0) copies the tensors to the
    CPU and writes the file through :class:`~fabric_core.io.torch_io.TorchCheckpointIO` (temp file, then
    rename), the others return. Loading gives CPU tensors, which ``load_state_dict`` copies onto the
    XLA parameters.

    Args:
        zip_crc32: Write the zip CRC32s (see :class:`~fabric_core.io.torch_io.TorchCheckpointIO`).

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    def __init__(self, *, zip_crc32: bool = False) -> None:
        device.require_torch_xla(type(self).__name__, _XLA_AVAILABLE)
        super().__init__(zip_crc32=zip_crc32)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None) -> None:
        """Write ``checkpoint`` to ``path`` from the global master; other processes do nothing.

        Raises:
            TypeError: ``storage_options`` was given.
        """
        import torch_xla.core.xla_model as xm

        if xm.is_master_ordinal(local=False):
            super().save_checkpoint(move_data_to_device(checkpoint, "cpu"), path, storage_options=storage_options)
