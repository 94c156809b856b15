"""Processes started by Kubeflow's PyTorchJob operator."""

from __future__ import annotations

import os

from fabric_core.environments._scheduled import RankVariables, ScheduledEnvironment, Variable

__all__ = ["KubeflowEnvironment", "never_detected"]


def never_detected() -> bool:
    """The registry's probe for Kubeflow: never chosen by ``"auto"`` (``detect()`` raises, as in Lightning)."""
    return False


class KubeflowEnvironment(ScheduledEnvironment):
    """Reads the topology a Kubeflow PyTorchJob exports: one process per pod.

    Never detected automatically, because its variables (``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``,
    ``RANK``) are the same ones torchrun and hand-started runs use: pass it in ``Fabric(plugins=...)``.
    Each pod is one node with one process, so the local rank is 0 and the node rank is the global rank.
    """

    variables = RankVariables(
        world_size=Variable("WORLD_SIZE", minimum=1),
        global_rank=Variable("RANK"),
        local_rank=0,  # one process per pod
        node_rank=Variable("RANK"),  # every pod is its own node
    )

    @staticmethod
    def detect() -> bool:
        """Kubeflow's variables do not tell it apart from torchrun's: select it explicitly.

        Raises:
            NotImplementedError: Always, as in Lightning.
        """
        raise NotImplementedError("The Kubeflow environment can't be detected automatically.")

    def topology(self) -> tuple[int, int] | None:
        """``(1, WORLD_SIZE)``: one process per pod, every pod a node; ``None`` while ``WORLD_SIZE`` is unset."""
        return (1, self.world_size()) if "WORLD_SIZE" in os.environ else None
