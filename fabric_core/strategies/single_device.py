"""One process, one device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fabric_core.strategies.strategy import Strategy

if TYPE_CHECKING:
    from torch import Tensor

    from fabric_core.accelerators.accelerator import Accelerator
    from fabric_core.environments.environment import ClusterEnvironment
    from fabric_core.io.checkpoint_io import CheckpointIO
    from fabric_core.precision.precision import Precision

__all__ = ["SingleDeviceStrategy"]


class SingleDeviceStrategy(Strategy):
    """Runs everything in this process on one device; collectives are the identity."""

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision: Precision | None = None,
    ) -> None:
        super().__init__(accelerator=accelerator, checkpoint_io=checkpoint_io, precision=precision)
        self._device = torch.device(device) if device is not None else None

    # Lightning's signatures: extra arguments are accepted and ignored (one process has nothing to wait for
    # or reduce). The identity stays a bare return: all_reduce is on the per-step path.
    def all_reduce(self, tensor: Tensor | Any, *args: Any, **kwargs: Any) -> Tensor | Any:
        return tensor

    def barrier(self, name: str | None = None, *args: Any, **kwargs: Any) -> None:
        return None

    def connect(
        self,
        *,
        accelerator: Accelerator,
        precision: Precision,
        checkpoint_io: CheckpointIO | None,
        cluster_environment: ClusterEnvironment,
        parallel_devices: list[torch.device],
        num_nodes: int,
    ) -> None:
        super().connect(
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=checkpoint_io,
            cluster_environment=cluster_environment,
            parallel_devices=parallel_devices,
            num_nodes=num_nodes,
        )
        if self._device is None and parallel_devices:
            self._device = parallel_devices[0]

    @property
    def root_device(self) -> torch.device:
        return self._device if self._device is not None else torch.device("cpu")
