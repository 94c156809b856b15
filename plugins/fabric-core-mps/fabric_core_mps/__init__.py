"""Apple silicon GPUs for fabric-core: ``Fabric(accelerator="mps")`` (also chosen by ``"gpu"`` and ``"auto"``).

Every name is loaded on first access, so importing this package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from fabric_core_mps.accelerator import MPSAccelerator
    from fabric_core_mps.device import is_available

__all__ = ["MPSAccelerator", "is_available"]
__version__ = "0.1.0"

_WHERE: Final = {"MPSAccelerator": "fabric_core_mps.accelerator", "is_available": "fabric_core_mps.device"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
