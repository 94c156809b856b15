"""The CUDA accelerator and its device helpers: Lightning's ``accelerators.cuda``, where device counts are looked up.

This module is the one served at Lightning's path, so the names there are the ones every caller here asks
at call time: patching ``lightning.fabric.accelerators.cuda.num_cuda_devices`` (how tests pretend a machine has
GPUs) or ``..._is_ampere_or_later`` reaches the accelerator, the ``"cuda"`` probe and device parsing alike.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities import imports
from fabric_core.utilities.device_parser import parse_device_ids
from fabric_core.utilities.rank_zero import rank_zero_info
from fabric_core_cuda import device

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
        self._check_device_type(device)
        _check_cuda_matmul_precision(device)
        torch.cuda.set_device(device)

    def teardown(self) -> None:
        """Give the memory cached by torch's allocator back to the driver (:func:`clear_cuda_memory`)."""
        _clear_cuda_memory()

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        """Return the GPU indices ``devices`` asks for.

        Raises:
            InvalidConfigError: An unknown form, ``0``, duplicates, no GPU, or an index the machine lacks.
        """
        return parse_device_ids(devices, _get_all_visible_cuda_devices(), accelerator="cuda")

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        """One ``cuda:<index>`` device per requested GPU.

        ``devices`` is what :meth:`parse_devices` returned (a list of indices, taken as they are, as in
        Lightning), or anything ``Fabric(devices=...)`` accepts, parsed first.
        """
        indices = devices if _is_index_list(devices) else CUDAAccelerator.parse_devices(devices)
        return [torch.device("cuda", index) for index in indices]

    @staticmethod
    def auto_device_count() -> int:
        """Every visible GPU; only one in an interactive session, where processes cannot be re-launched."""
        count = num_cuda_devices()
        # Lightning's flag at its path, read at call time: a notebook or REPL (patching it pretends one).
        if count > 1 and imports._IS_INTERACTIVE:
            rank_zero_info(
                f"fabric-core uses 1 of the {count} visible GPUs because it runs in an interactive session. "
                "Pass `Fabric(devices=N, strategy='ddp_notebook')` to use more."
            )
            return 1
        return count

    @staticmethod
    def is_available() -> bool:
        """Whether a CUDA GPU is visible (asked through NVML: no CUDA context is created)."""
        return num_cuda_devices() > 0


def _is_index_list(devices: Any) -> bool:
    return isinstance(devices, list) and all(type(index) is int and index >= 0 for index in devices)


def probe() -> bool:
    """The ``"cuda"`` entry's probe: asks the class at call time, so a patched ``is_available`` answers too."""
    return bool(CUDAAccelerator.is_available())


def num_cuda_devices() -> int:
    """The number of CUDA devices visible to this process, without creating a CUDA context (0 on any failure)."""
    return device.count_visible_devices()


def is_cuda_available() -> bool:
    """Whether a CUDA device is visible (without creating a CUDA context here)."""
    return num_cuda_devices() > 0


def _get_all_visible_cuda_devices() -> list[int]:
    """The indices of the visible CUDA devices, ``0 .. n-1`` (after ``CUDA_VISIBLE_DEVICES``)."""
    return list(range(num_cuda_devices()))


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """Return the indices of CUDA devices that can allocate memory right now.

    On clusters whose GPUs run in exclusive-process mode, a device busy with another job cannot be used;
    pass the result as ``Fabric(devices=find_usable_cuda_devices(2))``. Each device is tried in a short
    separate process, so this process creates no CUDA context and can still fork afterwards.

    Args:
        num_devices: How many devices to find; ``-1`` finds all usable ones, ``0`` returns ``[]``.

    Returns:
        ``num_devices`` usable indices (every usable one for ``-1``), lowest first.

    Raises:
        InvalidConfigError: ``num_devices`` is below ``-1``, there are no visible CUDA devices, or more are
            requested than the machine has.
        RuntimeError: Fewer devices than requested (none, for ``-1``) could allocate memory.
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < -1:
        raise InvalidConfigError(
            f"`find_usable_cuda_devices(num_devices={num_devices!r})`: expected -1 (all usable devices), 0, or "
            "a positive int.",
            argument="num_devices",
            value=num_devices,
        )
    if num_devices == 0:
        return []
    asked = "all usable" if num_devices == -1 else str(num_devices)
    visible = _get_all_visible_cuda_devices()
    if not visible:
        raise InvalidConfigError(
            f"You requested to find {asked} devices but there are no visible CUDA devices on this "
            "machine (check `nvidia-smi` and `CUDA_VISIBLE_DEVICES`).",
            argument="num_devices",
            value=num_devices,
        )
    if num_devices > len(visible):
        raise InvalidConfigError(
            f"You requested to find {num_devices} devices but this machine only has {len(visible)} GPUs. "
            f"Valid choices: -1 (all usable) or 1 to {len(visible)}.",
            argument="num_devices",
            value=num_devices,
        )
    usable = device.usable_among(visible)
    wanted = len(visible) if num_devices == -1 else num_devices
    if not usable or (num_devices != -1 and len(usable) < wanted):
        busy = [index for index in visible if index not in usable]
        raise RuntimeError(
            # Lightning's sentences, then why.
            f"You requested to find {asked} devices but only {len(usable)} are currently available. The devices "
            f"{busy} are occupied by other processes and can't be used at the moment: a fresh process could not "
            "allocate memory on them (e.g. GPUs in exclusive-process mode with another job on them)."
        )
    return usable[:wanted]


def is_ampere_or_later(cuda_device: torch.device | int | None = None) -> bool:
    """Whether the GPU (the current one by default) has compute capability 8.0 or later: TF32 tensor cores.

    Raises:
        AssertionError: This build of torch has no CUDA (torch's own error).
        RuntimeError: No such device.
    """
    major, _ = torch.cuda.get_device_capability(cuda_device)
    return major >= 8


@functools.cache  # the cache is the memory of the devices asked about: `cache_clear()` forgets
def hint_tf32(cuda_device: torch.device) -> None:
    """Suggest a faster float32 matmul precision once per device, on rank 0, where the GPU has TF32 tensor cores.

    GPUs of compute capability 8.0 and later (Ampere onwards) run float32 matmuls on tensor cores in TF32
    only if the user allows it; torch's default (``"highest"``) does not. Without CUDA this does nothing.
    ``torch.cuda.is_available()`` is asked, as Lightning asks it: this runs when a CUDA device is set up, so
    a CUDA context is about to exist anyway.
    """
    if not torch.cuda.is_available():
        return
    index = cuda_device.index if cuda_device.index is not None else torch.cuda.current_device()
    if not _is_ampere_or_later(index) or torch.get_float32_matmul_precision() != "highest":
        return
    rank_zero_info(
        # Lightning's sentences, then how.
        f"You are using a CUDA device ({torch.cuda.get_device_name(index)!r}) that has Tensor Cores. To properly "
        "utilize them, you should set `torch.set_float32_matmul_precision('medium' | 'high')` which will "
        "trade-off precision for performance: `torch.set_float32_matmul_precision('high')` runs float32 matmuls "
        "in TF32. See https://pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html"
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


# Lightning's names for the helpers above; callers here use these, so that a patch of them is seen.
_is_ampere_or_later = is_ampere_or_later
_check_cuda_matmul_precision = hint_tf32
_clear_cuda_memory = clear_cuda_memory
