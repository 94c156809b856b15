"""CUDA GPUs for fabric-core: ``Fabric(accelerator="cuda")`` (also chosen by ``"gpu"`` and ``"auto"``).

Every name is loaded on first access, so importing this package imports neither torch nor CUDA.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from fabric_core_cuda.accelerator import (
        CUDAAccelerator,
        find_usable_cuda_devices,
        is_cuda_available,
        num_cuda_devices,
    )

__all__ = ["CUDAAccelerator", "find_usable_cuda_devices", "is_cuda_available", "num_cuda_devices"]
__version__ = "0.1.0"

_WHERE: Final = {
    "CUDAAccelerator": "fabric_core_cuda.accelerator",
    "find_usable_cuda_devices": "fabric_core_cuda.accelerator",
    "is_cuda_available": "fabric_core_cuda.accelerator",
    "num_cuda_devices": "fabric_core_cuda.accelerator",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
