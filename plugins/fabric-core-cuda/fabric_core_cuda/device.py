"""How many CUDA devices this machine has, and which can allocate, asked without creating a CUDA context.

Creating a CUDA context in the parent process breaks every process forked from it later
(``ddp_fork``, notebooks, DataLoader workers). ``torch.cuda.is_available()`` creates one unless
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` is set, so the count here asks NVML instead, which honours
``CUDA_VISIBLE_DEVICES`` and touches no CUDA state. Everything else asks
:func:`fabric_core_cuda.accelerator.num_cuda_devices` (Lightning's ``accelerators.cuda.num_cuda_devices``, the
name tests patch to pretend a machine has GPUs), which counts with :func:`count_visible_devices`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Final

import torch

__all__ = ["count_visible_devices", "usable_among"]

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


def count_visible_devices() -> int:
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
