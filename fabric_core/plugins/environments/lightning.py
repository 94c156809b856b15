"""Lightning's ``plugins.environments.lightning`` path."""

from __future__ import annotations

from fabric_core.environments.lightning import LightningEnvironment, find_free_network_port

__all__ = ["LightningEnvironment", "find_free_network_port"]
