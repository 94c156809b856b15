"""Apple silicon GPUs for fabric-core: ``Fabric(accelerator="mps")`` (also chosen by ``"gpu"`` and ``"auto"``).

Every name is loaded on first access, so importing this package does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_mps.accelerator import MPSAccelerator
    from fabric_core_mps.device import is_available

__all__ = ["MPSAccelerator", "is_available"]
__version__ = "0.1.0"

_WHERE = {"MPSAccelerator": "fabric_core_mps.accelerator", "is_available": "fabric_core_mps.device"}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
