"""Processes started by ``torchrun`` (torch.distributed.elastic)."""

from __future__ import annotations

import os
import warnings

from fabric_core.environments._env import check_world_size, read_int
from fabric_core.environments.environment import ClusterEnvironment
from fabric_core.errors import FabricCoreWarning

__all__ = ["TorchElasticEnvironment"]

_DEFAULT_ADDRESS = "127.0.0.1"
_DEFAULT_PORT = 12910


class TorchElasticEnvironment(ClusterEnvironment):
    """Reads the topology torchrun exports: ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``GROUP_RANK``.

    Detected by ``TORCHELASTIC_RUN_ID``, which torchrun sets in every worker. torchrun starts the
    processes, and the world size and ranks it reports are the truth: the strategy cannot change them.
    """

    @property
    def creates_processes_externally(self) -> bool:
        """Always True: torchrun starts one process per device."""
        return True

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``; warns and uses ``127.0.0.1`` when torchrun did not set it."""
        if "MASTER_ADDR" not in os.environ:
            warnings.warn(
                f"MASTER_ADDR is not set under torchrun; using {_DEFAULT_ADDRESS}.",
                FabricCoreWarning,
                stacklevel=2,
            )
        return os.environ.get("MASTER_ADDR", _DEFAULT_ADDRESS)

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``; warns and uses 12910 when torchrun did not set it."""
        if "MASTER_PORT" not in os.environ:
            warnings.warn(
                f"MASTER_PORT is not set under torchrun; using {_DEFAULT_PORT}.",
                FabricCoreWarning,
                stacklevel=2,
            )
        return read_int("MASTER_PORT", _DEFAULT_PORT)

    @staticmethod
    def detect() -> bool:
        """Whether this process was started by torchrun (``TORCHELASTIC_RUN_ID`` is set)."""
        return "TORCHELASTIC_RUN_ID" in os.environ

    def world_size(self) -> int:
        """``WORLD_SIZE``."""
        return read_int("WORLD_SIZE", minimum=1)

    def set_world_size(self, size: int) -> None:
        """Ignored: torchrun's ``WORLD_SIZE`` is authoritative (:meth:`validate_settings` checks it)."""

    def global_rank(self) -> int:
        """``RANK``."""
        return read_int("RANK")

    def set_global_rank(self, rank: int) -> None:
        """Ignored: torchrun's ``RANK`` is authoritative."""

    def local_rank(self) -> int:
        """``LOCAL_RANK``."""
        return read_int("LOCAL_RANK")

    def node_rank(self) -> int:
        """``GROUP_RANK`` (torchrun's node rank), or 0."""
        return read_int("GROUP_RANK", 0)

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check that ``devices * num_nodes`` equals torchrun's ``WORLD_SIZE``.

        Raises:
            InvalidConfigError: They differ.
        """
        check_world_size("torchrun", self.world_size(), num_devices, num_nodes)

    def topology(self) -> tuple[int, int] | None:
        """``(LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE)``, as torchrun's ``--nproc-per-node`` and ``--nnodes`` made them.

        ``None`` where torchrun did not export ``LOCAL_WORLD_SIZE``, or where the nodes run different numbers
        of workers (their product is then not ``WORLD_SIZE``).
        """
        if "LOCAL_WORLD_SIZE" not in os.environ:
            return None
        per_node, world = read_int("LOCAL_WORLD_SIZE", minimum=1), self.world_size()
        nodes = read_int("GROUP_WORLD_SIZE", world // per_node, minimum=1)
        return (per_node, nodes) if per_node * nodes == world else None
