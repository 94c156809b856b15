"""The cluster environment of a Ray Train worker: ranks, world size and node placement from Ray Train."""

from __future__ import annotations

import os
import sys
from typing import Any

from fabric_core.environments.environment import ClusterEnvironment
from fabric_core.errors import EnvironmentSetupError, InvalidConfigError

__all__ = ["RayEnvironment"]


def _context() -> Any:
    train = sys.modules.get("ray.train")
    if train is None:
        raise EnvironmentSetupError(
            "RayEnvironment: this process is not a Ray Train worker (ray.train is not imported). Start the "
            "script with `fabric-core run --launcher ray ...` or `fabric_core_ray.run(...)`."
        )
    return train.get_context()


class RayEnvironment(ClusterEnvironment):
    """Reads a Ray Train worker's place in the job from ``ray.train.get_context()``.

    Detected inside a Ray Train worker only: the probe looks for an imported ``ray.train`` (a Ray Train
    worker has imported it to run its training function) and asks it for the context, which Ray Train
    refuses outside a worker. It never imports Ray itself, so detection costs nothing elsewhere.

    Ray Train starts the processes, and its ranks and world size are the truth. The rendezvous address and
    port are ``MASTER_ADDR`` and ``MASTER_PORT``, which the runner of this plugin sets on every worker
    (Ray Train's own torch backend sets them too, when a user's ``TorchTrainer`` runs a Fabric script).
    """

    @property
    def creates_processes_externally(self) -> bool:
        """Always True: Ray Train starts one process per worker."""
        return True

    @property
    def main_address(self) -> str:
        """``MASTER_ADDR``: the address of the worker of rank 0."""
        return self._read("MASTER_ADDR")

    @property
    def main_port(self) -> int:
        """``MASTER_PORT``: a port free on the worker of rank 0 when the job started."""
        value = self._read("MASTER_PORT")
        if not value.isdigit():
            raise InvalidConfigError(
                f"MASTER_PORT={value!r} is not a port number.", argument="MASTER_PORT", value=value
            )
        return int(value)

    @staticmethod
    def _read(name: str) -> str:
        value = os.environ.get(name)
        if value is None:
            raise EnvironmentSetupError(
                f"RayEnvironment: {name} is not set in this Ray Train worker. Start the script with "
                "`fabric-core run --launcher ray` or `fabric_core_ray.run(...)`, or use a `TorchTrainer`, "
                "whose torch backend sets it."
            )
        return value

    @staticmethod
    def detect() -> bool:
        """Whether this process is a Ray Train worker running a training function."""
        if sys.modules.get("ray.train") is None:
            return False
        try:
            return int(_context().get_world_size()) >= 1
        except Exception:  # outside a worker Ray Train raises RuntimeError; any failure means "not here"
            return False

    def world_size(self) -> int:
        """The number of Ray Train workers."""
        return int(_context().get_world_size())

    def set_world_size(self, size: int) -> None:
        """Ignored: Ray Train's world size is authoritative (:meth:`validate_settings` checks it)."""

    def global_rank(self) -> int:
        """This worker's rank among all workers."""
        return int(_context().get_world_rank())

    def set_global_rank(self, rank: int) -> None:
        """Ignored: Ray Train's rank is authoritative."""

    def local_rank(self) -> int:
        """This worker's rank among the workers on its node."""
        return int(_context().get_local_rank())

    def node_rank(self) -> int:
        """The rank of this worker's node."""
        return int(_context().get_node_rank())

    def topology(self) -> tuple[int, int] | None:
        """``(workers per node, nodes)``; ``None`` where Ray placed different numbers of workers on the nodes."""
        context = _context()
        per_node, world = int(context.get_local_world_size()), int(context.get_world_size())
        return (per_node, world // per_node) if per_node >= 1 and world % per_node == 0 else None

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check that ``devices * num_nodes`` is Ray Train's world size.

        Raises:
            InvalidConfigError: They differ.
        """
        world = self.world_size()
        if num_devices * num_nodes != world:
            raise InvalidConfigError(
                f"Ray Train started {world} workers, but `Fabric(devices={num_devices}, num_nodes={num_nodes})` "
                f"asks for {num_devices * num_nodes} processes. Leave `devices` and `num_nodes` at 'auto'/1 "
                "(fabric-core then uses Ray's placement), or set `--num-workers` to match.",
                argument="devices",
                value=num_devices,
            )
