"""Processes started by Kubeflow's PyTorchJob operator."""

from __future__ import annotations

import os

from fabric_core.environments._env import read_int, read_str
from fabric_core.environments.environment import ClusterEnvironment

__all__ = ["KubeflowEnvironment", "never_detected"]


def never_detected() -> bool:
    """The registry's probe for Kubeflow: never chosen by ``"auto"`` (``detect()`` raises, as in Lightning)."""
    return False


class KubeflowEnvironment(ClusterEnvironment):
    """Reads the topology a Kubeflow PyTorchJob exports: one process per pod.

    Never detected automatically, because its variables (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``,
    ``RANK``) are the same ones torchrun and hand-started runs use: pass it in ``Fabric(plugins=...)``.
    Each pod is one node with one process, so the local rank is 0 and the node rank is the global rank.
    """

    @property
    def creates_processes_externally(self) -> bool:
        """Always True: the operator starts one process per pod."""
        return True

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``."""
        return read_str("MASTER_ADDR")

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``."""
        return read_int("MASTER_PORT")

    @staticmethod
    def detect() -> bool:
        """Kubeflow's variables do not tell it apart from torchrun's: select it explicitly.

        Raises:
            NotImplementedError: Always, as in Lightning.
        """
        raise NotImplementedError("The Kubeflow environment can't be detected automatically.")

    def world_size(self) -> int:
        """``WORLD_SIZE``."""
        return read_int("WORLD_SIZE", minimum=1)

    def set_world_size(self, size: int) -> None:
        """Ignored: the operator's ``WORLD_SIZE`` is authoritative."""

    def global_rank(self) -> int:
        """``RANK``."""
        return read_int("RANK")

    def set_global_rank(self, rank: int) -> None:
        """Ignored: the operator's ``RANK`` is authoritative."""

    def local_rank(self) -> int:
        """Always 0: one process per pod."""
        return 0

    def node_rank(self) -> int:
        """The global rank: every pod is its own node."""
        return self.global_rank()

    def topology(self) -> tuple[int, int] | None:
        """``(1, WORLD_SIZE)``: one process per pod, every pod a node; ``None`` while ``WORLD_SIZE`` is unset."""
        return (1, self.world_size()) if "WORLD_SIZE" in os.environ else None
