"""Processes started by IBM Spectrum LSF's ``jsrun``."""

from __future__ import annotations

import os
import socket
from typing import Final

from fabric_core.environments._env import read_int, topology_of_hosts
from fabric_core.environments._scheduled import RankVariables, ScheduledEnvironment, Variable
from fabric_core.errors import InvalidConfigError, MissingVariableError

__all__ = ["LSFEnvironment"]

_REQUIRED: Final = ("LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE")
_PORT_BASE: Final = 10000


class LSFEnvironment(ScheduledEnvironment):
    """Reads the topology of a ``jsrun`` job from the ``JSM_NAMESPACE_*`` variables and the rank file.

    The rank file (``LSB_DJOB_RANKFILE``) lists one host per line: first the launch node, which runs no
    task, then the host of every task in rank order. The rendezvous address is the first compute host;
    the node rank is the position of this host among the distinct compute hosts. The port is
    ``MASTER_PORT``, else 10000 plus the last three digits of ``LSB_JOBID`` (Lightning's), the same on
    every task.

    Raises:
        InvalidConfigError: At construction: the rank file is unset, unreadable or empty, or ``LSB_JOBID``
            is unset (and ``MASTER_PORT`` too).
    """

    variables = RankVariables(
        world_size=Variable("JSM_NAMESPACE_SIZE"),
        global_rank=Variable("JSM_NAMESPACE_RANK"),
        local_rank=Variable("JSM_NAMESPACE_LOCAL_RANK"),
        node_rank=0,  # read from the rank file instead: see node_rank()
    )
    launcher_name = "jsrun"

    def __init__(self) -> None:
        self._hosts: list[str] | None = None
        # Read now, as Lightning does: a job without them fails at `Fabric(...)`, not at the rendezvous.
        self.compute_hosts()
        _ = self.main_port

    def fallback_address(self) -> str:
        """The first compute host of the rank file."""
        return self.compute_hosts()[0]

    def fallback_port(self) -> int:
        """10000 + ``LSB_JOBID % 1000``."""
        if "LSB_JOBID" not in os.environ:
            raise MissingVariableError(
                "Could not find job id in environment variable LSB_JOBID: the LSF environment derives the port from"
                " it. Set MASTER_PORT, or run under an LSF job.",
                argument="LSB_JOBID",
            )
        return _PORT_BASE + read_int("LSB_JOBID") % 1000

    @staticmethod
    def detect() -> bool:
        """Whether this process is a ``jsrun`` task (the LSF job and JSM namespace variables are set)."""
        return all(name in os.environ for name in _REQUIRED)

    def node_rank(self) -> int:
        """The position of this host among the distinct compute hosts of the rank file.

        Raises:
            InvalidConfigError: This host is not in the rank file.
        """
        return self._get_node_rank()

    def _get_node_rank(self) -> int:
        """Lightning's name of :meth:`node_rank`'s reading of the rank file (the one to patch, as in Lightning).

        Raises:
            InvalidConfigError: This host is not in the rank file.
        """
        nodes = list(dict.fromkeys(self.compute_hosts()))
        hostname = socket.gethostname()
        # Rank files may hold short names where gethostname() returns a fully qualified one, or back.
        for candidate in (hostname, hostname.split(".")[0]):
            for index, node in enumerate(nodes):
                if node == candidate or node.split(".")[0] == candidate:
                    return index
        raise InvalidConfigError(
            f"This host {hostname!r} is not among the compute hosts of the LSF rank file "
            f"{os.environ.get('LSB_DJOB_RANKFILE')!r}: {', '.join(nodes)}.",
            argument="LSB_DJOB_RANKFILE",
            value=os.environ.get("LSB_DJOB_RANKFILE"),
        )

    def compute_hosts(self) -> list[str]:
        """The host of every task, in rank order, read from the rank file once.

        Raises:
            InvalidConfigError: ``LSB_DJOB_RANKFILE`` is unset, unreadable, or lists no compute host.
        """
        if self._hosts is None:
            self._hosts = self._read_hosts()
        return self._hosts

    @staticmethod
    def _read_hosts() -> list[str]:
        """Lightning's name: read the compute hosts from the rank file, every line after the launch node's.

        Raises:
            InvalidConfigError: ``LSB_DJOB_RANKFILE`` is unset, unreadable, or lists no compute host.
        """
        path = os.environ.get("LSB_DJOB_RANKFILE")
        if not path:  # in Lightning's words, which tell the two cases apart
            problem = (
                "Did not find the environment variable `LSB_DJOB_RANKFILE`"
                if path is None
                else "The environment variable `LSB_DJOB_RANKFILE` is empty"
            )
            raise InvalidConfigError(
                f"{problem}: the LSF environment needs jsrun's rank file.",
                argument="LSB_DJOB_RANKFILE",
                value=path,
            )
        try:
            with open(path, encoding="utf-8") as file:
                lines = [line.strip() for line in file]
        except OSError as exc:
            raise InvalidConfigError(
                f"Cannot read the LSF rank file LSB_DJOB_RANKFILE={path!r}: {exc}.",
                argument="LSB_DJOB_RANKFILE",
                value=path,
            ) from exc
        hosts = [line for line in lines if line][1:]  # the first line is the launch node
        if not hosts:
            raise InvalidConfigError(
                f"The LSF rank file {path!r} lists no compute host (only the launch node, or nothing).",
                argument="LSB_DJOB_RANKFILE",
                value=path,
            )
        return hosts

    def topology(self) -> tuple[int, int] | None:
        """``(tasks per host, hosts)`` from the rank file; ``None`` where hosts run different numbers of tasks.

        Raises:
            InvalidConfigError: The rank file is missing, unreadable or empty.
        """
        return topology_of_hosts(self.compute_hosts())
