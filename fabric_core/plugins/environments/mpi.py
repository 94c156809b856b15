"""Lightning's ``plugins.environments.mpi`` path."""

from __future__ import annotations

from fabric_core.environments.mpi import MPIEnvironment

__all__ = ["MPIEnvironment"]
