"""Lightning's ``plugins.environments.lsf`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.environments.lsf import LSFEnvironment

__all__ = ["LSFEnvironment"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
