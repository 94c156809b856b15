"""Lightning's ``plugins.precision.double`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.precision.double import DoublePrecision

__all__ = ["DoublePrecision"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
