"""Processes started by ``torchrun`` (torch.distributed.elastic)."""

from __future__ import annotations

import os
import warnings

from fabric_core.environments._env import read_int
from fabric_core.environments._scheduled import RankVariables, ScheduledEnvironment, Variable
from fabric_core.errors import FabricCoreWarning

__all__ = ["TorchElasticEnvironment"]

_DEFAULT_ADDRESS = "127.0.0.1"
_DEFAULT_PORT = 12910


class TorchElasticEnvironment(ScheduledEnvironment):
    """Reads the topology torchrun exports: ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``GROUP_RANK``.

    Detected by ``TORCHELASTIC_RUN_ID``, which torchrun sets in every worker. torchrun starts the
    processes, and the world size and ranks it reports are the truth: the strategy cannot change them.
    """

    variables = RankVariables(
        world_size=Variable("WORLD_SIZE", minimum=1),
        global_rank=Variable("RANK"),
        local_rank=Variable("LOCAL_RANK"),
        node_rank=Variable("GROUP_RANK", default=0),
    )
    launcher_name = "torchrun"

    def fallback_address(self) -> str:
        """Warns and uses ``127.0.0.1`` when torchrun did not set ``MASTER_ADDR``."""
        warnings.warn(
            f"MASTER_ADDR is not set under torchrun; using {_DEFAULT_ADDRESS}.", FabricCoreWarning, stacklevel=3
        )
        return _DEFAULT_ADDRESS

    def fallback_port(self) -> int:
        """Warns and uses 12910 when torchrun did not set ``MASTER_PORT``."""
        warnings.warn(f"MASTER_PORT is not set under torchrun; using {_DEFAULT_PORT}.", FabricCoreWarning, stacklevel=3)
        return _DEFAULT_PORT

    @staticmethod
    def detect() -> bool:
        """Whether this process was started by torchrun (``TORCHELASTIC_RUN_ID`` is set)."""
        return "TORCHELASTIC_RUN_ID" in os.environ

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
