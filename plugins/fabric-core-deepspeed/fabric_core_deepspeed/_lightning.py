"""Lightning's private helpers of its ``strategies.deepspeed`` module, in Lightning's signatures.

Code written for Lightning imports them from ``fabric_core.strategies.deepspeed`` (which
:mod:`fabric_core_deepspeed.strategy` backs). Each is a thin adapter over this plugin's own function where the
plugin has one (:mod:`~fabric_core_deepspeed._checkpoint`, :mod:`~fabric_core_deepspeed._config`); the device
index check, which the strategy runs, and the order of Lightning's positional parameters have no other home.
"""

from __future__ import annotations

import os
from typing import Any, Final

import torch

from fabric_core.utilities.imports import RequirementCache
from fabric_core_deepspeed._checkpoint import check_folder, engines_in, is_checkpoint_folder, warn_on_deepspeed_keys
from fabric_core_deepspeed._config import add_precision

__all__ = [
    "POSITIONAL",
    "_DEEPSPEED_AVAILABLE",
    "_DEEPSPEED_GREATER_EQUAL_0_16",
    "_format_precision_config",
    "_get_deepspeed_engines_from_state",
    "_is_deepspeed_checkpoint",
    "_validate_checkpoint_directory",
    "_validate_device_index_selection",
    "_validate_state_keys",
]

#: Truthy when deepspeed is installed (checked on first use; nothing is imported).
_DEEPSPEED_AVAILABLE: Final = RequirementCache("deepspeed")
_DEEPSPEED_GREATER_EQUAL_0_16: Final = RequirementCache("deepspeed>=0.16.0")

#: The parameters a ``DeepSpeedStrategy(...)`` call may pass by position, in Lightning's order (own options and
#: wiring mixed).
# fmt: off
POSITIONAL: Final = (
    "accelerator", "zero_optimization", "stage", "remote_device", "offload_optimizer", "offload_parameters",
    "offload_params_device", "nvme_path", "params_buffer_count", "params_buffer_size", "max_in_cpu",
    "offload_optimizer_device", "optimizer_buffer_count", "block_size", "queue_depth", "single_submit",
    "overlap_events", "thread_count", "pin_memory", "sub_group_size", "contiguous_gradients", "overlap_comm",
    "allgather_partitions", "reduce_scatter", "allgather_bucket_size", "reduce_bucket_size",
    "zero_allow_untested_optimizer", "logging_batch_size_per_gpu", "config", "logging_level", "parallel_devices",
    "cluster_environment", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
    "partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
    "synchronize_checkpoint_boundary", "load_full_weights", "precision", "process_group_backend", "timeout",
    "exclude_frozen_parameters"
)
# fmt: on

_get_deepspeed_engines_from_state: Final = engines_in
_is_deepspeed_checkpoint: Final = is_checkpoint_folder
_validate_state_keys: Final = warn_on_deepspeed_keys


def _validate_checkpoint_directory(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` is a DeepSpeed checkpoint folder.

    Raises:
        FileNotFoundError: It is not; the message names the enclosing checkpoint folder when ``path`` lies
            inside one.
    """
    check_folder(path)


def _validate_device_index_selection(parallel_devices: list[torch.device]) -> None:
    """Check that the devices are ``0, 1, ..., n-1``: DeepSpeed puts each process on the device of its local rank.

    Raises:
        RuntimeError: Other indices were selected; the message shows the ``CUDA_VISIBLE_DEVICES`` that selects
            them instead.
    """
    indices = [device.index for device in parallel_devices]
    if indices != list(range(len(indices))):
        visible = ",".join(str(index) for index in indices)
        raise RuntimeError(
            f"The selected device indices {indices!r} don't match the local rank values of processes: DeepSpeed "
            f"places each process on the device of its local rank, so they must be 0 to {len(indices) - 1}. If you "
            "need to select GPUs at a specific index, set the `CUDA_VISIBLE_DEVICES` environment variable instead. "
            f"For example: `CUDA_VISIBLE_DEVICES={visible}`."
        )


def _format_precision_config(
    config: dict[str, Any],
    precision: str,
    loss_scale: float,
    loss_scale_window: int,
    min_loss_scale: int,
    initial_scale_power: int,
    hysteresis: int,
) -> None:
    """Add the ``fp16`` (with these loss-scaling values) or ``bf16`` section ``precision`` needs to ``config``.

    Raises:
        InvalidConfigError: The config already enables the other half type.
    """
    scaling = {
        "loss_scale": loss_scale,
        "initial_scale_power": initial_scale_power,
        "loss_scale_window": loss_scale_window,
        "hysteresis": hysteresis,
        "min_loss_scale": min_loss_scale,
    }
    add_precision(config, precision, scaling)
