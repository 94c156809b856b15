"""Lightning's ``plugins.environments.lightning`` path."""

from __future__ import annotations

from fabric_core.environments.lightning import LightningEnvironment

__all__ = ["LightningEnvironment"]
