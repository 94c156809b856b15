"""Lightning's ``plugins.environments.kubeflow`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.environments.kubeflow import KubeflowEnvironment

__all__ = ["KubeflowEnvironment"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
