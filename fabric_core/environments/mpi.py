"""Processes started by an MPI launcher (``mpirun``, ``mpiexec``), through mpi4py."""

from __future__ import annotations

import os
import socket
from typing import Any

from fabric_core.environments._env import check_world_size, find_free_network_port, topology_of_hosts
from fabric_core.environments.environment import ClusterEnvironment
from fabric_core.utilities._requirements import RequirementCache

__all__ = ["MPIEnvironment"]

#: Truthy when mpi4py is installed (checked on first use). Lightning's name at this module's Lightning path
#: (``plugins.environments.mpi``), where tests patch it to pretend either way.
_MPI4PY_AVAILABLE = RequirementCache("mpi4py")


class MPIEnvironment(ClusterEnvironment):
    """Reads the topology from MPI's world communicator; needs ``mpi4py``.

    MPI knows every rank but not local ranks, nodes or a TCP rendezvous, so on construction every rank
    shares its host name (one ``allgather``) and rank 0 shares an address and a port (one ``bcast``).
    Every rank builds the environment while it sets up, so the collectives line up. Nodes are numbered
    in the order their first rank appears; the local rank counts the lower ranks on the same host.

    Raises:
        ModuleNotFoundError: mpi4py is not installed.
    """

    def __init__(self) -> None:
        comm = _world_communicator()
        if comm is None:
            raise ModuleNotFoundError(
                "MPIEnvironment needs mpi4py, which is not installed. Run `pip install mpi4py`.",
                name="mpi4py",
            )
        self._comm = comm
        rank: int = comm.Get_rank()
        hostname = socket.gethostname()
        hosts: list[str] = comm.allgather(hostname)
        self._node_rank = list(dict.fromkeys(hosts)).index(hostname)
        self._local_rank = hosts[:rank].count(hostname)
        self._topology = topology_of_hosts(hosts)
        rendezvous = None
        if rank == 0:
            address = os.environ.get("MASTER_ADDR", hostname)
            port = int(os.environ.get("MASTER_PORT") or find_free_network_port())
            rendezvous = (address, port)
        self._main_address, self._main_port = comm.bcast(rendezvous, root=0)

    @property
    def creates_processes_externally(self) -> bool:
        """Always True: the MPI launcher starts every process."""
        return True

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR`` on rank 0, else rank 0's host name."""
        address: str = self._main_address
        return address

    @property
    def main_port(self) -> int:
        """``MASTER_PORT`` on rank 0, else a free port rank 0 found."""
        port: int = self._main_port
        return port

    @staticmethod
    def detect() -> bool:
        """Whether mpi4py is installed and this process is one of several MPI ranks. Never raises.

        The launcher's variables are read first, so that an ordinary run never initialises MPI (importing
        ``mpi4py.MPI`` does) just to learn it is not under MPI.
        """
        sizes = [os.environ.get(name, "") for name in _LAUNCHER_SIZE_VARIABLES]
        if not any(size.isdigit() and int(size) > 1 for size in sizes):
            return False
        try:
            comm = _world_communicator()
            return comm is not None and int(comm.Get_size()) > 1
        except Exception:
            return False

    def world_size(self) -> int:
        """The size of MPI's world communicator."""
        size: int = self._comm.Get_size()
        return size

    def set_world_size(self, size: int) -> None:
        """Ignored: MPI's world size is authoritative."""

    def global_rank(self) -> int:
        """This process's rank in MPI's world communicator."""
        rank: int = self._comm.Get_rank()
        return rank

    def set_global_rank(self, rank: int) -> None:
        """Ignored: MPI's rank is authoritative."""

    def local_rank(self) -> int:
        """The number of lower ranks on this host."""
        return self._local_rank

    def node_rank(self) -> int:
        """The position of this host among the hosts, in order of their lowest rank."""
        return self._node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check that ``devices * num_nodes`` equals the number of MPI ranks.

        Raises:
            InvalidConfigError: They differ.
        """
        check_world_size("the MPI launcher", self.world_size(), num_devices, num_nodes)

    def topology(self) -> tuple[int, int] | None:
        """``(ranks per host, hosts)`` from the ranks' host names; ``None`` where hosts run different counts."""
        return self._topology


#: World-size variables set by the common MPI launchers: Open MPI, MPICH / Intel MPI (Hydra), MVAPICH.
_LAUNCHER_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def _world_communicator() -> Any:
    """``mpi4py.MPI.COMM_WORLD``, or ``None`` when mpi4py is not installed.

    Imported here, not at module level: importing ``mpi4py.MPI`` initialises MPI.
    """
    if not _MPI4PY_AVAILABLE:
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD
