"""Lightning Fabric's private helpers of its ``strategies.model_parallel`` module, in Lightning's signatures.

Code written for Lightning (lightning.pytorch's ``ModelParallelStrategy`` and ``FSDPStrategy``) imports them
from ``fabric_core.strategies.model_parallel``, which :mod:`fabric_core_fsdp.model_parallel` backs. Gradient
sync is this plugin's :class:`~fabric_core_fsdp._parameters.GradientSyncPause`; files are read and written by the
core's checkpoint I/O and the DCP helpers of :mod:`fabric_core_fsdp._lightning_fsdp`. ``_save_checkpoint`` and
``_load_checkpoint`` keep Lightning's contract (one model per checkpoint, optimizer states from a list, its
errors), which the strategies' own checkpoints (:mod:`fabric_core_fsdp._state`) do not have.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.io.distributed import META_FILE, optimizer_state_by_name
from fabric_core.io.restore import check_requested_keys
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.strategies.strategy import put_filtered
from fabric_core.utilities.load import _move_state_into
from fabric_core.utilities.types import Stateful
from fabric_core_fsdp._lightning_fsdp import (
    _distributed_checkpoint_load,
    _distributed_checkpoint_save,
    _get_full_state_dict_context,
    _is_full_checkpoint,
    _is_sharded_checkpoint,
)
from fabric_core_fsdp._parameters import GradientSyncPause, ShardedBackwardSyncControl
from fabric_core_fsdp._sharded import clean_name
from fabric_core_fsdp._wrapper import has_fsdp1_units

__all__ = [
    "TModel",
    "_FSDPNoSync",
    "_ParallelBackwardSyncControl",
    "_has_dtensor_modules",
    "_load_checkpoint",
    "_load_raw_module_state",
    "_load_raw_module_state_from_path",
    "_named_parameters_and_buffers_to_load",
    "_rekey_optimizer_state_if_needed",
    "_save_checkpoint",
]

TModel = TypeVar("TModel", bound=Module)
_ParallelBackwardSyncControl = ShardedBackwardSyncControl
_FSDPNoSync = GradientSyncPause


def _has_dtensor_modules(module: object) -> TypeGuard[Module]:
    """Whether ``module`` is a module with DTensor parameters (sharded by FSDP2 or tensor parallelism)."""
    return isinstance(module, Module) and any(isinstance(p, DTensor) for p in module.parameters())


def _named_parameters_and_buffers_to_load(module: Module) -> Iterator[tuple[str, Any]]:
    """``module``'s own buffers, then its own parameters, as ``(name, tensor)``: what its state dict holds."""
    for name, tensor in itertools.chain(module.named_buffers(recurse=False), module.named_parameters(recurse=False)):
        if name not in module._non_persistent_buffers_set:
            yield name, tensor


def _rekey_optimizer_state_if_needed(optimizer_state_dict: dict[str, Any], module: Module) -> dict[str, Any]:
    """An optimizer state keyed by position (a plain ``optimizer.state_dict()``) keyed by ``module``'s parameter
    names instead, assuming the optimizer was built over ``module.parameters()``; one keyed by name as it is."""
    names = [clean_name(name) for name, _ in module.named_parameters()]
    return optimizer_state_by_name(optimizer_state_dict, names)


def _load_raw_module_state(
    state_dict: dict[str, Any], module: Module, world_size: int = 1, strict: bool = True
) -> None:
    """Load a full (unsharded) ``state_dict`` into ``module``: sharded (DTensor or FSDP1) or plain.

    Raises:
        KeyError: With ``strict``, a parameter or persistent buffer of a DTensor module is not in ``state_dict``.
    """
    if _has_dtensor_modules(module):
        for prefix, sub in module.named_modules():
            for name, _ in _named_parameters_and_buffers_to_load(sub):
                key = f"{prefix}.{name}" if prefix else name
                if strict and key not in state_dict:
                    raise KeyError(
                        f"The model contains a key '{key}' that does not exist in the loaded checkpoint. To disable "
                        "strict loading, set `strict=False`."
                    )
        # Every rank holds the whole file: each takes its own shards from it.
        set_model_state_dict(module, state_dict, options=StateDictOptions(full_state_dict=True, strict=False))
    elif has_fsdp1_units(module):
        with _get_full_state_dict_context(module, world_size=world_size, rank0_only=False):
            module.load_state_dict(state_dict, strict=strict)
    else:
        module.load_state_dict(state_dict, strict=strict)


def _load_raw_module_state_from_path(path: Path, module: Module, world_size: int, strict: bool = True) -> None:
    """Load the full state dict in the file ``path`` (memory-mapped) into ``module``.

    Raises:
        ValueError: ``path`` is not a file (a sharded folder cannot be loaded this way).
    """
    if not _is_full_checkpoint(path):
        raise ValueError(
            "Failed to load checkpoint directly into the model. The given path must be a single file containing the "
            f"full state dict: {path}"
        )
    state_dict = TorchCheckpointIO().load_checkpoint(path, map_location="cpu", mmap=True)
    _load_raw_module_state(state_dict, module, world_size=world_size, strict=strict)


def _the_model(state: dict[str, Any], verb: str) -> tuple[str, Module]:
    modules = [(key, value) for key, value in state.items() if _has_dtensor_modules(value)]
    if not modules:
        raise ValueError(
            "Could not find a distributed model in the provided checkpoint state. Please provide the model as part "
            f"of the state like so: `{verb}_checkpoint(..., state={{'model': model, ...}})`. Make sure you set up "
            f"the model (and optimizers if any) through the strategy before {verb}ing the checkpoint."
        )
    if len(modules) > 1:
        raise ValueError(
            f"Found multiple distributed models in the given state. {verb.capitalize()}ing distributed checkpoints is "
            f"currently limited to a single model per checkpoint. To {verb} multiple models, call the {verb} method "
            "for each model separately with a different path."
        )
    return modules[0]


def _save_checkpoint(
    path: Path,
    state: dict[str, Any],
    full_state_dict: bool,
    rank: int,
    filter: dict[str, Callable[[str, Any], bool]] | None = None,
) -> None:
    """Save the one DTensor model in ``state``, its optimizers and the rest: one file (rank 0) or a sharded folder.

    Every rank calls it. A full checkpoint replaces a sharded folder at ``path`` and the reverse.

    Raises:
        IsADirectoryError: ``full_state_dict`` and ``path`` is a folder that is not a sharded checkpoint.
        ValueError: ``state`` holds no DTensor model, or more than one.
    """
    if path.is_dir() and full_state_dict and not _is_sharded_checkpoint(path):
        raise IsADirectoryError(f"The checkpoint path exists and is a directory: {path}")
    _, module = _the_model(state, "save")
    options = StateDictOptions(full_state_dict=full_state_dict, cpu_offload=True)
    converted: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for key, obj in state.items():
        if isinstance(obj, Module):
            put_filtered(converted, key, get_model_state_dict(obj, options=options), filter)
        elif isinstance(obj, Optimizer):
            put_filtered(converted, key, get_optimizer_state_dict(module, obj, options=options), filter)
        else:
            put_filtered(metadata, key, obj.state_dict() if isinstance(obj, Stateful) else obj, filter)
    io = TorchCheckpointIO()
    if full_state_dict:
        if _is_sharded_checkpoint(path):
            shutil.rmtree(path)
        if rank == 0:
            io.save_checkpoint({**converted, **metadata}, path)
        return
    if path.is_file():
        path.unlink()
    path.mkdir(parents=True, exist_ok=True)
    _distributed_checkpoint_save(converted, path)
    if rank == 0:
        io.save_checkpoint(metadata, path / META_FILE)


def _load_checkpoint(
    path: Path,
    state: dict[str, Any],
    strict: bool = True,
    optimizer_states_from_list: bool = False,
    weights_only: bool | None = None,
) -> dict[str, Any]:
    """Restore the one DTensor model in ``state``, its optimizers and the requested entries; return the rest.

    ``optimizer_states_from_list``: a full checkpoint keeps the optimizer states in a list under
    ``"optimizer_states"`` (lightning.pytorch's layout), taken in the order of the optimizers in ``state``.

    Raises:
        ValueError: ``state`` holds no DTensor model, or more than one; ``path`` is neither a file nor a sharded
            folder.
        KeyError: With ``strict``, ``state`` asks for an entry the checkpoint lacks.
    """
    module_key, module = _the_model(state, "load")
    optimizers = {key: value for key, value in state.items() if isinstance(value, Optimizer)}
    requested = state.keys() - {module_key} - optimizers.keys()
    io = TorchCheckpointIO()
    if _is_sharded_checkpoint(path):
        module_state = {module_key: get_model_state_dict(module)}
        _distributed_checkpoint_load(module_state, path)
        set_model_state_dict(module, module_state[module_key], options=StateDictOptions(strict=strict))
        for key, optimizer in optimizers.items():
            optimizer_state: dict[str, Any] = {key: get_optimizer_state_dict(module, optimizer)}
            _distributed_checkpoint_load(optimizer_state, path)
            offloaded = StateDictOptions(cpu_offload=True)
            set_optimizer_state_dict(module, optimizer, optimizer_state[key], options=offloaded)
        meta_file = path / META_FILE
        metadata = io.load_checkpoint(meta_file, weights_only=weights_only) if meta_file.is_file() else {}
        check_requested_keys(requested, metadata.keys(), strict)
        _move_state_into(metadata, state, requested)
        return metadata
    if _is_full_checkpoint(path):
        checkpoint = io.load_checkpoint(path, map_location="cpu", weights_only=weights_only, mmap=True)
        _load_raw_module_state(checkpoint.pop(module_key), module, strict=strict)
        options = StateDictOptions(full_state_dict=True, strict=strict)
        for index, (key, optimizer) in enumerate(optimizers.items()):
            saved = checkpoint["optimizer_states"][index] if optimizer_states_from_list else checkpoint.pop(key)
            rekeyed: Any = _rekey_optimizer_state_if_needed(saved, module)
            set_optimizer_state_dict(module, optimizer, rekeyed, options=options)
        check_requested_keys(requested, checkpoint.keys(), strict)
        _move_state_into(checkpoint, state, requested)
        return checkpoint
    raise ValueError(
        f"The path {str(path)!r} does not point to a valid checkpoint. Make sure the path points to either a "
        "directory with distributed checkpoint shards, or a single file with a full checkpoint."
    )
