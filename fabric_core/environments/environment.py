"""The cluster-environment interface: where this process sits in the job."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

__all__ = ["ClusterEnvironment"]


class ClusterEnvironment(ABC):
    """Reads the job's topology from a scheduler or launcher (SLURM, torchelastic, ...).

    Registered by name through ``fabric_core_register_environments`` with a ``probe`` that says whether
    the current process runs under it.
    """

    #: What the kernel knows this class by (see ``fabric_core.plugin_api.KIND_ATTRIBUTE``).
    __fabric_core_kind__: ClassVar[str] = "environment"

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether the scheduler starts one process per device (so fabric-core must not launch any)."""

    @property
    @abstractmethod
    def main_address(self) -> str:
        """Address of the rank-0 node for the process-group rendezvous."""

    @property
    @abstractmethod
    def main_port(self) -> int:
        """Port on the rank-0 node for the process-group rendezvous."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether the current process runs under this environment. Never raises."""

    @abstractmethod
    def world_size(self) -> int:
        """Total number of processes."""

    @abstractmethod
    def set_world_size(self, size: int) -> None:
        """Record the world size (for environments that do not know it by themselves)."""

    @abstractmethod
    def global_rank(self) -> int:
        """Rank of this process among all processes."""

    @abstractmethod
    def set_global_rank(self, rank: int) -> None:
        """Record the global rank (for environments that do not know it by themselves)."""

    @abstractmethod
    def local_rank(self) -> int:
        """Rank of this process on its node."""

    @abstractmethod
    def node_rank(self) -> int:
        """Rank of this node."""

    def topology(self) -> tuple[int, int] | None:
        """``(processes per node, nodes)`` as the scheduler started them, or ``None`` where it does not say.

        ``Fabric(devices="auto")`` takes its device count (and, left at 1, ``num_nodes``) from here, so that a
        job started by torchrun, srun or mpirun runs as one job instead of one copy per process. Return
        ``None`` where the count is unknown or differs between nodes.
        """
        return None

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:  # noqa: B027 - optional
        """Raise if the scheduler's topology contradicts ``devices``/``num_nodes``."""

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Undo changes to the process environment."""
