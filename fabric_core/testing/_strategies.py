"""Strategies connected to CPU devices, as ``Fabric(...)`` would connect them, for tests and test jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from fabric_core.environments.environment import ClusterEnvironment
    from fabric_core.precision.precision import Precision
    from fabric_core.strategies.parallel import ParallelStrategy

__all__ = ["connect_to_cpus"]

_Strategy = TypeVar("_Strategy", bound="ParallelStrategy")


def connect_to_cpus(
    strategy: _Strategy,
    num_processes: int = 2,
    *,
    precision: Precision | None = None,
    cluster_environment: ClusterEnvironment | None = None,
) -> _Strategy:
    """Connect ``strategy`` to ``num_processes`` CPU devices on one node, without launching anything.

    Args:
        strategy: The strategy to connect.
        num_processes: How many CPU devices (one process each).
        precision: The precision plugin (``Precision()``, full precision, by default).
        cluster_environment: Where ranks and addresses come from (``LightningEnvironment()`` by default).

    Returns:
        ``strategy``, connected.
    """
    import torch

    from fabric_core.accelerators.cpu import CPUAccelerator
    from fabric_core.environments.lightning import LightningEnvironment
    from fabric_core.precision.precision import Precision

    strategy.connect(
        accelerator=CPUAccelerator(),
        precision=precision if precision is not None else Precision(),
        checkpoint_io=None,
        cluster_environment=cluster_environment if cluster_environment is not None else LightningEnvironment(),
        parallel_devices=[torch.device("cpu")] * num_processes,
        num_nodes=1,
    )
    return strategy
