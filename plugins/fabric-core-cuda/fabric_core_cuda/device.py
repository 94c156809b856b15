"""How many CUDA devices this machine has, asked without creating a CUDA context.

Creating a CUDA context in the parent process breaks every process forked from it later
(``ddp_fork``, notebooks, DataLoader workers). ``torch.cuda.is_available()`` creates one unless
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` is set, so the probe here asks NVML instead, which honours
``CUDA_VISIBLE_DEVICES`` and touches no CUDA state. :func:`num_cuda_devices` is the one function tests
patch to pretend a machine has GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Final

import torch

from fabric_core.errors import InvalidConfigError

__all__ = ["find_usable_cuda_devices", "is_available", "num_cuda_devices", "visible_device_indices"]

_PROBE_TIMEOUT_S: Final = 120
# Run in a separate interpreter: allocating on a device creates a CUDA context there, which this process
# must not hold (forking breaks, and on exclusive-process GPUs it would block the job's own workers).
_USABLE_SCRIPT: Final = """
import json, sys
import torch
usable = []
for index in json.loads(sys.argv[1]):
    try:
        torch.tensor(0, device=torch.device("cuda", index))
    except Exception:  # busy (RuntimeError), or no CUDA in this build of torch (AssertionError)
        continue
    usable.append(index)
print(json.dumps(usable))
"""


def num_cuda_devices() -> int:
    """Return the number of CUDA devices visible to this process, without creating a CUDA context.

    Once CUDA is initialised in this process, torch's own count is exact and costs nothing more. Before,
    NVML (or AMD SMI on ROCm builds) answers; it honours ``CUDA_VISIBLE_DEVICES``. Only if neither library
    can be loaded does this fall back to the CUDA runtime's count, which initialises the driver: there is
    no fork-safe way to count devices without them.

    Returns:
        The number of devices; 0 for a build of torch without CUDA, or on any failure.
    """
    try:
        if not torch.cuda._is_compiled():
            return 0
        if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # unannotated in torch
            return int(torch.cuda.device_count())
        count = torch.cuda._device_count_amdsmi() if torch.version.hip else torch.cuda._device_count_nvml()
        if count >= 0:
            return int(count)
        return int(torch.cuda.device_count())
    except Exception:
        return 0


def visible_device_indices() -> list[int]:
    """The indices of the visible CUDA devices, ``0 .. n-1`` (after ``CUDA_VISIBLE_DEVICES``); no CUDA context."""
    return list(range(num_cuda_devices()))


def is_available() -> bool:
    """Return whether at least one CUDA device is visible (the ``"cuda"`` accelerator's probe). Never raises."""
    return num_cuda_devices() > 0


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
    visible = list(range(num_cuda_devices()))
    if not visible:
        raise InvalidConfigError(
            f"You requested to find {asked} CUDA device(s) but there are no visible CUDA devices on this "
            "machine (check `nvidia-smi` and `CUDA_VISIBLE_DEVICES`).",
            argument="num_devices",
            value=num_devices,
        )
    if num_devices > len(visible):
        raise InvalidConfigError(
            f"You requested to find {num_devices} CUDA devices but this machine only has {len(visible)}. "
            f"Valid choices: -1 (all usable) or 1 to {len(visible)}.",
            argument="num_devices",
            value=num_devices,
        )
    usable = usable_among(visible)
    wanted = len(visible) if num_devices == -1 else num_devices
    if not usable or (num_devices != -1 and len(usable) < wanted):
        raise RuntimeError(
            f"You requested to find {asked} CUDA devices but only {len(usable)} of the {len(visible)} visible ones "
            f"can allocate memory ({usable}); the others are busy, e.g. in exclusive-process mode with another "
            "job on them."
        )
    return usable[:wanted]


def usable_among(indices: list[int]) -> list[int]:
    """Return the indices among ``indices`` on which a fresh process can allocate a tensor.

    Raises:
        RuntimeError: The probing process failed or did not finish in time.
    """
    command = [sys.executable, "-c", _USABLE_SCRIPT, json.dumps(indices)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, env=dict(os.environ), check=False
        )
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"Probing CUDA devices {indices} did not finish within {_PROBE_TIMEOUT_S} s.") from err
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"Probing CUDA devices {indices} failed (exit code {done.returncode}): {done.stderr[-2000:]}"
        )
    found: list[int] = json.loads(lines[-1])
    return found
