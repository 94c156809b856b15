"""The base of the environments whose scheduler starts the processes and exports their ranks in variables.

SLURM, LSF, torchrun and Kubeflow differ only in which variable holds what, and in how they fall back when the
rendezvous address or port is not exported: each subclass declares a :class:`RankVariables` table and, where it
needs one, a fallback. Reading and validating the variables (with the messages of :func:`read_int`) is done
here once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import ClassVar

from fabric_core.environments._env import check_world_size, read_int, read_str
from fabric_core.environments.environment import ClusterEnvironment

log = logging.getLogger(__name__)

__all__ = ["RankVariables", "ScheduledEnvironment", "Variable"]


@dataclass(frozen=True)
class Variable:
    """An environment variable that holds an int.

    Attributes:
        name: The variable, e.g. ``"SLURM_PROCID"``.
        default: The value where it is unset; ``None`` makes it required.
        minimum: The least value accepted, if any.
    """

    name: str
    default: int | None = None
    minimum: int | None = None

    def read(self) -> int:
        """The variable's value.

        Raises:
            InvalidConfigError: Required and unset, not an integer, or below ``minimum`` (naming the variable).
        """
        return read_int(self.name, self.default, minimum=self.minimum)


@dataclass(frozen=True)
class RankVariables:
    """Which variable gives each number that places a process in the job.

    Attributes:
        world_size: The number of processes.
        global_rank: This process's rank among all of them.
        local_rank: Its rank on its node; an int where it is fixed (one process per pod: 0).
        node_rank: The rank of its node; an int where it is fixed.
        main_address: The variable naming the rendezvous host (used where it is set).
        main_port: The variable naming the rendezvous port (used where it is set).
    """

    world_size: Variable
    global_rank: Variable
    local_rank: Variable | int
    node_rank: Variable | int
    main_address: str = "MASTER_ADDR"
    main_port: str = "MASTER_PORT"


def _read(source: Variable | int) -> int:
    return source if isinstance(source, int) else source.read()


class ScheduledEnvironment(ClusterEnvironment):
    """A job whose scheduler started one process per device and exports where each one sits.

    The exported values are authoritative: :meth:`set_world_size` and :meth:`set_global_rank` ignore what a
    strategy records. Subclasses declare :attr:`variables` and :meth:`detect`; where the scheduler may leave
    the rendezvous address or port unset, they override :meth:`fallback_address` / :meth:`fallback_port`.
    """

    #: Which variable gives what.
    variables: ClassVar[RankVariables]
    #: The name users know the launcher by (``"torchrun"``): :meth:`validate_settings` then checks that
    #: ``devices * num_nodes`` equals its world size. ``None``: no check.
    launcher_name: ClassVar[str | None] = None

    @property
    def creates_processes_externally(self) -> bool:
        """Always True: the scheduler starts one process per device."""
        return True

    @property
    def main_address(self) -> str:
        """The address variable (``MASTER_ADDR``) where set, else :meth:`fallback_address`."""
        address = os.environ.get(self.variables.main_address)
        return address if address is not None else self.fallback_address()

    @property
    def main_port(self) -> int:
        """The port variable (``MASTER_PORT``) where set, else :meth:`fallback_port`."""
        if self.variables.main_port in os.environ:
            return read_int(self.variables.main_port)
        return self.fallback_port()

    def fallback_address(self) -> str:
        """The rendezvous address where the scheduler exported none.

        Raises:
            InvalidConfigError: By default: the address variable is required.
        """
        return read_str(self.variables.main_address)

    def fallback_port(self) -> int:
        """The rendezvous port where the scheduler exported none.

        Raises:
            InvalidConfigError: By default: the port variable is required.
        """
        return read_int(self.variables.main_port)

    def world_size(self) -> int:
        """The declared world-size variable."""
        return self.variables.world_size.read()

    def set_world_size(self, size: int) -> None:
        """Ignored: the scheduler's world size is authoritative (:meth:`validate_settings` checks it)."""
        log.debug("%s.set_world_size was called, but setting world size is not allowed. Ignored.", type(self).__name__)

    def global_rank(self) -> int:
        """The declared global-rank variable."""
        return self.variables.global_rank.read()

    def set_global_rank(self, rank: int) -> None:
        """Ignored: the scheduler's rank is authoritative."""
        log.debug(
            "%s.set_global_rank was called, but setting global rank is not allowed. Ignored.", type(self).__name__
        )

    def local_rank(self) -> int:
        """The declared local-rank variable (or its fixed value)."""
        return _read(self.variables.local_rank)

    def node_rank(self) -> int:
        """The declared node-rank variable (or its fixed value)."""
        return _read(self.variables.node_rank)

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check that ``devices * num_nodes`` equals the scheduler's world size (where :attr:`launcher_name` is set).

        Raises:
            InvalidConfigError: They differ.
        """
        if self.launcher_name is not None:
            check_world_size(self.launcher_name, self.world_size(), num_devices, num_nodes)
