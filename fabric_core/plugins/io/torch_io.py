"""Lightning's ``plugins.io.torch_io`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.io.torch_io import TorchCheckpointIO

__all__ = ["TorchCheckpointIO"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
