"""Lightning Fabric's private helpers of its ``strategies.fsdp`` module, in Lightning's signatures.

Code written for Lightning (lightning.pytorch's FSDP strategy first) imports them from
``fabric_core.strategies.fsdp``, which :mod:`fabric_core_fsdp.fsdp` backs. Most are addresses of this plugin's
FSDP1 helpers (:mod:`fabric_core_fsdp._wrapper`) or of the core's checkpoint readers; what only Lightning's
callers need (the ``FSDP.state_dict_type`` contexts, the hybrid-sharding check of a strategy that builds no
mesh itself) is written here.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Final

from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.fsdp import ShardingStrategy
from torch.nn import Module

from fabric_core.io.distributed import SafeFileSystemReader, dcp_errors, is_distributed_checkpoint, safe_load_planner
from fabric_core_fsdp import _wrapper
from fabric_core_fsdp._fsdp1 import parse_sharding
from fabric_core_fsdp._sharded import move_metrics_to_device

__all__ = [
    "_FSDP_ALIASES",
    "_FSDPBackwardSyncControl",
    "_activation_checkpointing_kwargs",
    "_auto_wrap_policy_kwargs",
    "_distributed_checkpoint_load",
    "_distributed_checkpoint_save",
    "_get_full_state_dict_context",
    "_get_sharded_state_dict_context",
    "_has_fsdp_modules",
    "_init_cpu_offload",
    "_init_sharding_strategy",
    "_is_full_checkpoint",
    "_is_sharded_checkpoint",
    "_move_torchmetrics_to_device",
    "_optimizer_has_flat_params",
    "_setup_activation_checkpointing",
]

#: The registered names that choose the FSDP strategy (see the plugin's registration module).
_FSDP_ALIASES: Final = ("fsdp", "fsdp_cpu_offload")

_FSDPBackwardSyncControl = _wrapper.FSDP1BackwardSyncControl
_activation_checkpointing_kwargs = _wrapper.checkpointing_selection
_setup_activation_checkpointing = _wrapper.checkpoint_activations
_init_cpu_offload = _wrapper.fsdp1_cpu_offload
_optimizer_has_flat_params = _wrapper.has_flat_params
_has_fsdp_modules = _wrapper.has_fsdp1_units
_move_torchmetrics_to_device = move_metrics_to_device
#: A folder written by ``torch.distributed.checkpoint`` (it holds ``.metadata``).
_is_sharded_checkpoint = is_distributed_checkpoint


def _is_full_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is one file (a full checkpoint, as opposed to a sharded folder)."""
    return Path(path).is_file()


def _auto_wrap_policy_kwargs(policy: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``auto_wrap_policy`` set to the FSDP1 policy for ``policy`` (unchanged for ``None``).

    Raises:
        InvalidConfigError: ``policy`` has a form :func:`~fabric_core_fsdp._wrapper.wrap_policy` refuses.
    """
    converted = _wrapper.wrap_policy(policy, "auto_wrap_policy")
    if converted is not None:
        kwargs["auto_wrap_policy"] = converted
    return kwargs


def _init_sharding_strategy(sharding_strategy: str | ShardingStrategy, kwargs: dict[str, Any]) -> ShardingStrategy:
    """torch's ``ShardingStrategy`` for a name (any case) or member, checked against the FSDP1 ``kwargs``.

    A hybrid strategy needs to know its groups: the caller wraps with ``auto_wrap_policy``, a
    ``process_group`` pair or a ``device_mesh`` (Lightning's strategies build no mesh for it themselves).

    Raises:
        InvalidConfigError: ``process_group`` and ``device_mesh`` together (a ``ValueError``).
        UnknownShardingStrategyError: An unknown name (a ``KeyError``).
        RuntimeError: A hybrid strategy with none of those three arguments.
    """
    _wrapper.check_group_or_mesh(kwargs)
    strategy = parse_sharding(sharding_strategy, None).strategy
    grouping = ("auto_wrap_policy", "process_group", "device_mesh")
    if "HYBRID" in strategy.name and all(kwargs.get(k) is None for k in grouping):
        raise RuntimeError(
            f"The hybrid sharding strategy {strategy.name!r} requires you to pass at least one of the parameters: "
            "`auto_wrap_policy`, `process_group` tuple, or `device_mesh`."
        )
    return strategy


def _get_sharded_state_dict_context(module: Module) -> contextlib.AbstractContextManager[Any]:
    """``FSDP.state_dict_type`` for sharded model and optimizer state dicts, offloaded to CPU memory."""
    from torch.distributed.fsdp import FullyShardedDataParallel, StateDictType
    from torch.distributed.fsdp.api import ShardedOptimStateDictConfig, ShardedStateDictConfig

    context: contextlib.AbstractContextManager[Any] = FullyShardedDataParallel.state_dict_type(
        module=module,
        state_dict_type=StateDictType.SHARDED_STATE_DICT,
        state_dict_config=ShardedStateDictConfig(offload_to_cpu=True),
        optim_state_dict_config=ShardedOptimStateDictConfig(offload_to_cpu=True),
    )
    return context


def _get_full_state_dict_context(
    module: Module, world_size: int, rank0_only: bool = True
) -> contextlib.AbstractContextManager[Any]:
    """``FSDP.state_dict_type`` for full model and optimizer state dicts in CPU memory (on rank 0 only, or all).

    ``world_size`` is unused: it is part of Lightning's signature.
    """
    from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType
    from torch.distributed.fsdp.api import FullOptimStateDictConfig

    context: contextlib.AbstractContextManager[Any] = FullyShardedDataParallel.state_dict_type(
        module=module,
        state_dict_type=StateDictType.FULL_STATE_DICT,
        state_dict_config=FullStateDictConfig(offload_to_cpu=True, rank0_only=rank0_only),
        optim_state_dict_config=FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=rank0_only),
    )
    return context


def _distributed_checkpoint_save(converted_state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``converted_state`` (state dicts of DTensors or FSDP1 shards) into the folder ``path``; collective."""
    dcp_save(converted_state, checkpoint_id=path)


def _distributed_checkpoint_load(module_state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Fill ``module_state`` in place from the sharded folder ``path``; collective.

    The folder is read by the core's reader: ``.metadata`` unpickled with an allow-list, a missing or truncated
    shard reported as a ``CheckpointError`` naming the file.
    """
    reader = SafeFileSystemReader(path)
    with dcp_errors(path):
        dcp_load(module_state, storage_reader=reader, planner=safe_load_planner(reader))
