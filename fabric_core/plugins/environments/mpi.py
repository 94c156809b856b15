"""Lightning's ``plugins.environments.mpi`` path."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.environments.mpi import MPIEnvironment
from fabric_core.utilities._requirements import RequirementCache

__all__ = ["MPIEnvironment"]

#: Truthy when mpi4py is installed (checked on first use).
_MPI4PY_AVAILABLE = RequirementCache("mpi4py")

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
