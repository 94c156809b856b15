"""Lightning's ``plugins.environments.torchelastic`` path."""

from __future__ import annotations

from fabric_core.environments.torchelastic import TorchElasticEnvironment

__all__ = ["TorchElasticEnvironment"]
