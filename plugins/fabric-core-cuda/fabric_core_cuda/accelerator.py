"""The CUDA accelerator: NVIDIA (and ROCm) GPUs."""

from __future__ import annotations

import sys
from typing import Any, Final

import torch

from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.device_parser import parse_device_ids
from fabric_core.utilities.rank_zero import rank_zero_info
from fabric_core_cuda import device
from fabric_core_cuda.device import find_usable_cuda_devices, is_available, num_cuda_devices, visible_device_indices

# This module backs Lightning's ``accelerators.cuda`` path, which has these helpers next to the class.
__all__ = [
    "CUDAAccelerator",
    "clear_cuda_memory",
    "find_usable_cuda_devices",
    "hint_tf32",
    "is_ampere_or_later",
    "is_cuda_available",
    "num_cuda_devices",
]

#: Lightning's name: whether a CUDA device is visible (without creating a CUDA context here).
is_cuda_available = is_available

# Devices whose TF32 hint has been given in this process: once is enough.
_HINTED: set[int] = set()


class CUDAAccelerator(Accelerator):
    """Runs on CUDA GPUs; processes talk through NCCL.

    ``devices`` takes an int ``N`` (the first N GPUs), ``-1`` (all of them), ``"0,2"`` or ``[0, 2]`` (those
    GPUs); ``"auto"`` means every visible GPU, or one in a notebook or REPL.
    """

    device_type = "cuda"
    process_group_backend = "nccl"

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` this process's current CUDA device.

        Raises:
            InvalidConfigError: ``device`` is not a CUDA device.
        """
        if device.type != "cuda":
            raise InvalidConfigError(
                f"`CUDAAccelerator.setup_device({device})`: device should be CUDA, got {device.type!r} instead.",
                argument="device",
                value=device,
            )
        hint_tf32(device)
        torch.cuda.set_device(device)

    def teardown(self) -> None:
        """Give the memory cached by torch's allocator back to the driver (:func:`clear_cuda_memory`)."""
        clear_cuda_memory()

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        """Return the GPU indices ``devices`` asks for.

        Raises:
            InvalidConfigError: An unknown form, ``0``, duplicates, no GPU, or an index the machine lacks.
        """
        return parse_device_ids(devices, device.visible_device_indices(), accelerator="cuda")

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One ``cuda:<index>`` device per requested GPU."""
        return [torch.device("cuda", index) for index in CUDAAccelerator.parse_devices(devices)]

    @staticmethod
    def auto_device_count() -> int:
        """Every visible GPU; only one in an interactive session, where processes cannot be re-launched."""
        count = device.num_cuda_devices()
        if count > 1 and (hasattr(sys, "ps1") or bool(sys.flags.interactive)):
            rank_zero_info(
                f"fabric-core uses 1 of the {count} visible GPUs because it runs in an interactive session. "
                "Pass `Fabric(devices=N, strategy='ddp_notebook')` to use more."
            )
            return 1
        return count

    @staticmethod
    def is_available() -> bool:
        """Whether a CUDA GPU is visible (asked through NVML: no CUDA context is created)."""
        return device.is_available()


def is_ampere_or_later(cuda_device: torch.device | int | None = None) -> bool:
    """Whether the GPU (the current one by default) has compute capability 8.0 or later: TF32 tensor cores.

    Raises:
        AssertionError: This build of torch has no CUDA (torch's own error).
        RuntimeError: No such device.
    """
    major, _ = torch.cuda.get_device_capability(cuda_device)
    return major >= 8


def hint_tf32(cuda_device: torch.device) -> None:
    """Suggest a faster float32 matmul precision once per GPU, on rank 0, where the GPU has TF32 tensor cores.

    GPUs of compute capability 8.0 and later (Ampere onwards) run float32 matmuls on tensor cores in TF32
    only if the user allows it; torch's default (``"highest"``) does not. Without a visible GPU this does
    nothing (and creates no CUDA context).
    """
    if not device.is_available():
        return
    index = cuda_device.index if cuda_device.index is not None else torch.cuda.current_device()
    if index in _HINTED:
        return
    _HINTED.add(index)
    if not is_ampere_or_later(index) or torch.get_float32_matmul_precision() != "highest":
        return
    rank_zero_info(
        f"The CUDA device {torch.cuda.get_device_name(index)!r} has tensor cores for TF32. To use them, call "
        "`torch.set_float32_matmul_precision('high')` (or 'medium'), which trades a little float32 precision "
        "for speed. See https://pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html"
    )


def clear_cuda_memory() -> None:
    """Give the memory cached by torch's allocator and cuBLAS's workspaces back to the driver.

    Nothing happens where CUDA was never initialised in this process (no CUDA context is created for it).
    """
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # unannotated in torch
        return
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # absent under torch.compile
    if clear_workspaces is not None:
        clear_workspaces()  # cuBLAS keeps them per stream until told otherwise (pytorch/pytorch#95668)
    torch.cuda.empty_cache()


# Lightning's names for the helpers above.
_get_all_visible_cuda_devices: Final = visible_device_indices
_is_ampere_or_later: Final = is_ampere_or_later
_check_cuda_matmul_precision: Final = hint_tf32
_clear_cuda_memory: Final = clear_cuda_memory
