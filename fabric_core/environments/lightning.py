"""The default cluster environment: one machine, or nodes started by hand or by ``fabric-core run``."""

from __future__ import annotations

import os

from fabric_core.environments._env import find_free_network_port, read_int
from fabric_core.environments.environment import ClusterEnvironment

__all__ = ["LightningEnvironment", "find_free_network_port"]


class LightningEnvironment(ClusterEnvironment):
    """The fallback when no scheduler is detected.

    The rendezvous comes from ``MASTER_ADDR`` (default ``127.0.0.1``) and ``MASTER_PORT`` (default: a
    free port, chosen once and written to ``MASTER_PORT`` so that processes started later agree on it).
    ``LOCAL_RANK`` and ``NODE_RANK`` (or torchrun's ``GROUP_RANK``) default to 0. The world size and the
    global rank are not known from the environment: the strategy sets them.
    """

    def __init__(self) -> None:
        self._world_size = 1
        self._global_rank = 0
        self._chosen_port: str | None = None

    @property
    def creates_processes_externally(self) -> bool:
        """True when ``LOCAL_RANK`` is set: this process was started by a launcher, not by the user."""
        return "LOCAL_RANK" in os.environ

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``, or ``127.0.0.1``."""
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``; when unset, a free port is chosen and written to ``MASTER_PORT``."""
        if "MASTER_PORT" not in os.environ:
            self._chosen_port = str(find_free_network_port())
            os.environ["MASTER_PORT"] = self._chosen_port
        return read_int("MASTER_PORT")

    @staticmethod
    def detect() -> bool:
        """Always True: this environment is the fallback."""
        return True

    def world_size(self) -> int:
        """The world size set by the strategy (1 until then)."""
        return self._world_size

    def set_world_size(self, size: int) -> None:
        """Record the world size computed by the strategy."""
        self._world_size = size

    def global_rank(self) -> int:
        """The global rank set by the strategy (0 until then)."""
        return self._global_rank

    def set_global_rank(self, rank: int) -> None:
        """Record the global rank computed by the strategy."""
        self._global_rank = rank

    def local_rank(self) -> int:
        """``LOCAL_RANK``, or 0."""
        return read_int("LOCAL_RANK", 0)

    def node_rank(self) -> int:
        """``NODE_RANK``, else ``GROUP_RANK`` (torchrun), else 0."""
        if "NODE_RANK" in os.environ:
            return read_int("NODE_RANK")
        return read_int("GROUP_RANK", 0)

    def teardown(self) -> None:
        """Remove ``WORLD_SIZE``, and ``MASTER_PORT`` if this environment chose it.

        A later run in the same process then picks a fresh port instead of one that may still be in use.
        """
        os.environ.pop("WORLD_SIZE", None)
        if self._chosen_port is not None and os.environ.get("MASTER_PORT") == self._chosen_port:
            del os.environ["MASTER_PORT"]
        self._chosen_port = None
