"""Processes started by an MPI launcher (``mpirun``, ``mpiexec``), through mpi4py."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from fabric_core.environments._env import check_world_size, find_free_network_port, topology_of_hosts
from fabric_core.environments.environment import ClusterEnvironment
from fabric_core.utilities._requirements import RequirementCache

__all__ = ["MPIEnvironment"]

log = logging.getLogger(__name__)

#: Truthy when mpi4py is installed (checked on first use). Lightning's name at this module's Lightning path
#: (``plugins.environments.mpi``), where tests patch it to pretend either way.
_MPI4PY_AVAILABLE = RequirementCache("mpi4py")


class MPIEnvironment(ClusterEnvironment):
    """Reads the topology from MPI's world communicator; needs ``mpi4py``.

    MPI knows every rank but not local ranks, nodes or a TCP rendezvous. Building the environment only takes
    the world communicator (``_comm_world``, as in Lightning); the first question about the node, the local
    rank, the topology or the rendezvous runs every exchange at once, as collectives of all ranks: the host
    names are gathered and shared, a communicator of the node's ranks is split off (``_comm_local``), and rank
    0 shares an address and a port. Every rank asks one of these while it sets up, so the collectives line up,
    and none is left for later. Nodes are numbered in the order of their lowest rank, so node 0 holds rank 0.

    Raises:
        ModuleNotFoundError: mpi4py is not installed.
    """

    def __init__(self) -> None:
        if not _MPI4PY_AVAILABLE:
            raise ModuleNotFoundError(
                "MPIEnvironment needs mpi4py, which is not installed. Run `pip install mpi4py`.",
                name="mpi4py",
            )
        from mpi4py import MPI  # initialises MPI: only here, once the environment is wanted

        self._comm_world: Any = MPI.COMM_WORLD
        self._comm_local: Any = None
        # Lightning's attributes, filled by the exchange on first use.
        self._node_rank: int | None = None
        self._main_address: str | None = None
        self._main_port: int | None = None
        self._topology: tuple[int, int] | None = None

    @property
    def creates_processes_externally(self) -> bool:
        """Always True: the MPI launcher starts every process."""
        return True

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR`` on rank 0, else rank 0's host name (collective on first use)."""
        if self._main_address is None:
            self._exchange()
        assert self._main_address is not None
        return self._main_address

    @property
    def main_port(self) -> int:
        """``MASTER_PORT`` on rank 0, else a free port rank 0 found (collective on first use)."""
        if self._main_port is None:
            self._exchange()
        assert self._main_port is not None
        return self._main_port

    @staticmethod
    def detect() -> bool:
        """Whether mpi4py is installed and this process is one of several MPI ranks. Never raises.

        The launcher's variables are read first, so that an ordinary run never initialises MPI (importing
        ``mpi4py.MPI`` does) just to learn it is not under MPI.
        """
        sizes = [os.environ.get(name, "") for name in _LAUNCHER_SIZE_VARIABLES]
        if not any(size.isdigit() and int(size) > 1 for size in sizes):
            return False
        if not _MPI4PY_AVAILABLE:
            return False
        try:
            from mpi4py import MPI

            return int(MPI.COMM_WORLD.Get_size()) > 1
        except Exception:
            return False

    def world_size(self) -> int:
        """The size of MPI's world communicator."""
        size: int = self._comm_world.Get_size()
        return size

    def set_world_size(self, size: int) -> None:
        """Ignored: MPI's world size is authoritative."""
        log.debug("MPIEnvironment.set_world_size was called, but setting world size is not allowed. Ignored.")

    def global_rank(self) -> int:
        """This process's rank in MPI's world communicator."""
        rank: int = self._comm_world.Get_rank()
        return rank

    def set_global_rank(self, rank: int) -> None:
        """Ignored: MPI's rank is authoritative."""
        log.debug("MPIEnvironment.set_global_rank was called, but setting global rank is not allowed. Ignored.")

    def local_rank(self) -> int:
        """This process's rank among the ranks of its host (collective on first use)."""
        if self._comm_local is None:
            self._exchange()
        rank: int = self._comm_local.Get_rank()
        return rank

    def node_rank(self) -> int:
        """The position of this host among the hosts, in order of their lowest rank (collective on first use)."""
        if self._node_rank is None:
            self._exchange()
        assert self._node_rank is not None
        return self._node_rank

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check that ``devices * num_nodes`` equals the number of MPI ranks.

        Raises:
            InvalidConfigError: They differ.
        """
        check_world_size("the MPI launcher", self.world_size(), num_devices, num_nodes)

    def topology(self) -> tuple[int, int] | None:
        """``(ranks per host, hosts)`` from the ranks' host names; ``None`` where hosts run different counts."""
        if self._node_rank is None:
            self._exchange()
        return self._topology

    def _exchange(self) -> None:
        """Learn the node, the local communicator, the topology and the rendezvous: collectives of every rank."""
        comm = self._comm_world
        hostname = socket.gethostname()
        hosts = comm.gather(hostname, root=0)  # every rank's host, on rank 0 (None elsewhere)
        hosts = comm.bcast(list(hosts) if hosts is not None else [], root=0)
        self._node_rank = list(dict.fromkeys(hosts)).index(hostname)
        self._topology = topology_of_hosts(list(hosts))
        self._comm_local = comm.Split(color=self._node_rank)  # ordered by world rank: the local rank
        rendezvous = None
        if comm.Get_rank() == 0:
            address = os.environ.get("MASTER_ADDR", hostname)
            rendezvous = (address, int(os.environ.get("MASTER_PORT") or find_free_network_port()))
        self._main_address, self._main_port = comm.bcast(rendezvous, root=0)


#: World-size variables set by the common MPI launchers: Open MPI, MPICH / Intel MPI (Hydra), MVAPICH.
_LAUNCHER_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")
