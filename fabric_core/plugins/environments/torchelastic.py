"""Lightning's ``plugins.environments.torchelastic`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.environments.torchelastic import TorchElasticEnvironment

__all__ = ["TorchElasticEnvironment"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
