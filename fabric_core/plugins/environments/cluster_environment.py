"""Lightning's ``plugins.environments.cluster_environment`` path."""

from __future__ import annotations

from fabric_core.environments.environment import ClusterEnvironment

__all__ = ["ClusterEnvironment"]
