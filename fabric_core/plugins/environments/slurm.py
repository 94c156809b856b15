"""Lightning's ``plugins.environments.slurm`` path."""

from __future__ import annotations

from fabric_core.environments.slurm import SLURMEnvironment

__all__ = ["SLURMEnvironment"]
