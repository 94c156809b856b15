"""Joining DeepSpeed's communication layer to the process group the strategy created."""

from __future__ import annotations

from datetime import timedelta

import torch

from fabric_core.errors import InvalidConfigError
from fabric_core.strategies.parallel import ParallelStrategy

__all__ = ["init_distributed", "node_variables"]


def node_variables(strategy: ParallelStrategy) -> dict[str, str]:
    """The variables DeepSpeed reads this process's place in the job from (``RANK``, ``MASTER_ADDR``, ...).

    Empty without a cluster environment.
    """
    environment = strategy.cluster_environment
    if environment is None:
        return {}
    return {
        "MASTER_ADDR": environment.main_address,
        "MASTER_PORT": str(environment.main_port),
        "RANK": str(strategy.global_rank),
        "WORLD_SIZE": str(strategy.world_size),
        "LOCAL_RANK": str(strategy.local_rank),
    }


def init_distributed(device: torch.device, backend: str, timeout: timedelta, logging_level: int) -> None:
    """Let DeepSpeed use the existing default process group (``deepspeed.init_distributed``).

    Args:
        device: This process's device; DeepSpeed's accelerator must be of its type.
        backend: The process group's backend.
        timeout: The collectives' timeout.
        logging_level: Level of DeepSpeed's logger (a ``logging`` level).

    Raises:
        InvalidConfigError: DeepSpeed picked an accelerator other than ``device``'s type.
    """
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    deepspeed.utils.logging.logger.setLevel(logging_level)
    chosen = get_accelerator().device_name()
    if chosen != device.type:
        raise InvalidConfigError(
            f"DeepSpeed runs on {chosen!r} but this process's device is {device}. Set the environment variable "
            f"`DS_ACCELERATOR={device.type}` before DeepSpeed is first imported, or choose "
            f"`Fabric(accelerator={chosen!r})`.",
            argument="accelerator",
            value=device.type,
        )
    deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, verbose=False, timeout=timeout)
