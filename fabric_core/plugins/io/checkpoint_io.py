"""Lightning's ``plugins.io.checkpoint_io`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.io.checkpoint_io import CheckpointIO

__all__ = ["CheckpointIO"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
