"""Lightning's ``plugins.environments.lightning`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.environments.lightning import LightningEnvironment, find_free_network_port

__all__ = ["LightningEnvironment", "find_free_network_port"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
