"""Lightning's ``plugins.environments.lsf`` path."""

from __future__ import annotations

from fabric_core.environments.lsf import LSFEnvironment

__all__ = ["LSFEnvironment"]
