"""The CUDA accelerator: NVIDIA (and ROCm) GPUs."""

from __future__ import annotations

import sys
from typing import Any

import torch

from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.device_parser import parse_device_ids
from fabric_core.utilities.rank_zero import rank_zero_info
from fabric_core_cuda import device
from fabric_core_cuda.device import find_usable_cuda_devices, is_available, num_cuda_devices

# This module backs Lightning's ``accelerators.cuda`` path, which has these helpers next to the class.
__all__ = ["CUDAAccelerator", "find_usable_cuda_devices", "is_cuda_available", "num_cuda_devices"]

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
        """Give the memory cached by torch's allocator back to the driver."""
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # unannotated in torch
            torch.cuda.empty_cache()

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        """Return the GPU indices ``devices`` asks for.

        Raises:
            InvalidConfigError: An unknown form, ``0``, duplicates, no GPU, or an index the machine lacks.
        """
        return parse_device_ids(devices, list(range(device.num_cuda_devices())), accelerator="cuda")

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


def hint_tf32(cuda_device: torch.device) -> None:
    """Suggest a faster float32 matmul precision once, on rank 0, where the GPU has TF32 tensor cores.

    GPUs of compute capability 8.0 and later (Ampere onwards) run float32 matmuls on tensor cores in TF32
    only if the user allows it; torch's default (``"highest"``) does not.
    """
    index = cuda_device.index if cuda_device.index is not None else torch.cuda.current_device()
    if index in _HINTED:
        return
    _HINTED.add(index)
    major, _ = torch.cuda.get_device_capability(index)
    if major < 8 or torch.get_float32_matmul_precision() != "highest":
        return
    rank_zero_info(
        f"The CUDA device {torch.cuda.get_device_name(index)!r} has tensor cores for TF32. To use them, call "
        "`torch.set_float32_matmul_precision('high')` (or 'medium'), which trades a little float32 precision "
        "for speed. See https://pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html"
    )
