"""CUDA GPUs for fabric-core: ``Fabric(accelerator="cuda")`` (also chosen by ``"gpu"`` and ``"auto"``).

Every name is loaded on first access, so importing this package imports neither torch nor CUDA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_cuda.accelerator import (
        CUDAAccelerator,
        find_usable_cuda_devices,
        is_cuda_available,
        num_cuda_devices,
    )

__all__ = ["CUDAAccelerator", "find_usable_cuda_devices", "is_cuda_available", "num_cuda_devices"]
__version__ = "0.1.0"

_WHERE = {
    "CUDAAccelerator": "fabric_core_cuda.accelerator",
    "find_usable_cuda_devices": "fabric_core_cuda.accelerator",
    "is_cuda_available": "fabric_core_cuda.accelerator",
    "num_cuda_devices": "fabric_core_cuda.accelerator",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
