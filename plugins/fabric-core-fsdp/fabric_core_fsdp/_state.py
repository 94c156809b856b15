"""Saving and loading the state of sharded (DTensor) models: a DCP folder, or one full file from rank 0.

Shared by :class:`~fabric_core_fsdp.FSDPStrategy` and :class:`~fabric_core_fsdp.ModelParallelStrategy`.
Every function here is collective: all ranks call it with the same ``state``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import InvalidConfigError
from fabric_core.io.atomic import committed_path, write_folder_collectively
from fabric_core.io.distributed import (
    META_FILE,
    SafeFileSystemReader,
    checkpoint_keys,
    dcp_errors,
    is_distributed_checkpoint,
    load_distributed_checkpoint,
    optimizer_state_by_name,
    optimizer_state_by_position,
    safe_load_planner,
)
from fabric_core.strategies.strategy import Stateful, put_filtered

if TYPE_CHECKING:
    from fabric_core_fsdp._sharded import ShardedStrategy

__all__ = ["load", "save_full", "save_sharded"]

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
Filter = Mapping[str, Callable[[str, Any], bool]]


def _split(state: Mapping[str, Any]) -> tuple[dict[str, Module], dict[str, Optimizer], dict[str, Any]]:
    modules = {k: v for k, v in state.items() if isinstance(v, Module)}
    optimizers = {k: v for k, v in state.items() if isinstance(v, Optimizer)}
    extras = {k: v for k, v in state.items() if k not in modules and k not in optimizers}
    return modules, optimizers, extras


def owner(optimizer: Optimizer, modules: Iterable[Module], key: str = "optimizer") -> Module:
    """The module whose parameters ``optimizer`` updates (DCP names optimizer state after its parameters).

    Raises:
        InvalidConfigError: No module in ``modules`` holds the optimizer's parameters.
    """
    ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for module in modules:
        if any(id(p) in ids for p in module.parameters()):
            return module
    raise InvalidConfigError(
        f"The optimizer under {key!r} updates no parameter of the models in the checkpoint state. Put the model it "
        f"belongs to in the same state, e.g. `fabric.save(path, {{'model': model, {key!r}: optimizer}})`.",
        argument="state",
        value=key,
    )


def _parameter_names(module: Module, optimizer: Optimizer) -> list[str]:
    """The names (as DCP writes them) of the optimizer's parameters, in the optimizer's order."""
    sharded: Any = get_optimizer_state_dict(module, optimizer)
    return [name for group in sharded["param_groups"] for name in group["params"]]


def _plain(extras: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.state_dict() if isinstance(v, Stateful) else v for k, v in extras.items()}


def save_sharded(strategy: ShardedStrategy, path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
    """Write ``path`` as a folder: each rank writes its shards, rank 0 the metadata and ``meta.pt``.

    The folder is written under a temporary name and put in place in one step by rank 0 once every rank
    has finished (:func:`~fabric_core.io.atomic.write_folder_collectively`), so an interrupted save leaves
    the previous checkpoint or the new one at ``path``, never a mix and never nothing; the next save sweeps
    what a killed one left.
    """
    modules, optimizers, extras = _split(state)
    tensors: dict[str, Any] = {key: get_model_state_dict(module) for key, module in modules.items()}
    for key, optimizer in optimizers.items():
        tensors[key] = get_optimizer_state_dict(owner(optimizer, modules.values(), key), optimizer)

    def write(temp: Path) -> None:
        dcp_save(tensors, checkpoint_id=temp)
        if strategy.is_global_zero:
            strategy.checkpoint_io.save_checkpoint(_plain(extras), temp / META_FILE)

    write_folder_collectively(strategy, path, write, "fsdp")


def save_full(
    strategy: ShardedStrategy,
    path: str | os.PathLike[str],
    state: Mapping[str, Any],
    filter: Filter | None = None,
) -> None:
    """Gather full state dicts on rank 0 (in CPU memory) and write them as one file from there."""
    modules, optimizers, _ = _split(state)
    checkpoint: dict[str, Any] = {}
    for key, value in state.items():
        if key in modules:
            value = get_model_state_dict(modules[key], options=_FULL)
        elif key in optimizers:
            module = owner(optimizers[key], modules.values(), key)
            value = get_optimizer_state_dict(module, optimizers[key], options=_FULL)
            value = optimizer_state_by_position(value) if value else value  # only rank 0 receives it
        else:
            value = _plain({key: value})[key]
        put_filtered(checkpoint, key, value, filter)
    if strategy.is_global_zero:
        # The checkpoint I/O replaces a sharded folder of the same name in one step too (`atomic_write`).
        strategy.checkpoint_io.save_checkpoint(checkpoint, Path(path))


def load(
    strategy: ShardedStrategy,
    path: str | os.PathLike[str],
    state: Module | Optimizer | dict[str, Any] | None,
    strict: bool = True,
    weights_only: bool | None = None,
) -> dict[str, Any]:
    """Restore ``state`` from a sharded folder or a full file; return what ``state`` did not ask for.

    Raises:
        FileNotFoundError: Nothing at ``path``.
        KeyError: With ``strict``, ``state`` asks for a key the checkpoint lacks.
        InvalidConfigError: A lone module or optimizer with a sharded folder (name it in a dict instead).
        CheckpointError: A file of the checkpoint is missing, truncated or damaged, or holds objects that
            ``weights_only`` refused.
    """
    target = committed_path(path)  # for a moment the previous checkpoint's `.old` name (see `replace_path`)
    if not target.exists():
        raise FileNotFoundError(f"Checkpoint file not found: {os.fspath(path)}")
    sharded = is_distributed_checkpoint(target)
    if not state:
        if sharded:
            return load_distributed_checkpoint(target, weights_only=weights_only)
        loaded: dict[str, Any] = strategy.checkpoint_io.load_checkpoint(target, weights_only=weights_only)
        return loaded
    if isinstance(state, (Module, Optimizer)):
        if sharded:
            raise InvalidConfigError(
                f"{os.fspath(path)!r} is a sharded checkpoint folder; load it with a dict naming what to restore, "
                "e.g. `fabric.load(path, {'model': model, 'optimizer': optimizer})`.",
                argument="path",
                value=os.fspath(path),
            )
        checkpoint = strategy.checkpoint_io.load_checkpoint(target, weights_only=weights_only)
        key = "model" if isinstance(state, Module) else "optimizer"
        _restore_full(strategy, {key: state}, {key: checkpoint}, strict)
        return {}
    if sharded:
        return _load_sharded(strategy, target, state, strict, weights_only)
    checkpoint = strategy.checkpoint_io.load_checkpoint(target, weights_only=weights_only)
    _check_keys(state, set(checkpoint), strict)
    return _restore_full(strategy, state, checkpoint, strict)


def _check_keys(state: Mapping[str, Any], available: set[str], strict: bool) -> None:
    if strict:
        missing = [k for k in state if k not in available]
        if missing:
            raise KeyError(
                f"The requested state contains a key '{missing[0]}' that does not exist in the loaded checkpoint. "
                "To disable strict loading, set `strict=False`."
            )


def _restore_full(
    strategy: ShardedStrategy, state: dict[str, Any], checkpoint: dict[str, Any], strict: bool
) -> dict[str, Any]:
    """Load full (unsharded) state dicts into sharded modules and optimizers; plain values into ``state``."""
    remainder = dict(checkpoint)
    modules = {k: v for k, v in state.items() if isinstance(v, Module)}
    candidates = [*modules.values(), *strategy.modules]
    for key, obj in list(state.items()):
        if key not in remainder:
            continue
        value = remainder.pop(key)
        if isinstance(obj, Module):
            set_model_state_dict(obj, value, options=StateDictOptions(full_state_dict=True, strict=strict))
        elif isinstance(obj, Optimizer):
            module = owner(obj, candidates, key)
            by_name = optimizer_state_by_name(value, _parameter_names(module, obj))
            set_optimizer_state_dict(module, obj, by_name, options=StateDictOptions(full_state_dict=True))
        elif isinstance(obj, Stateful):
            obj.load_state_dict(value)
        else:
            state[key] = value
    return remainder


def _load_sharded(
    strategy: ShardedStrategy, folder: Path, state: dict[str, Any], strict: bool, weights_only: bool | None
) -> dict[str, Any]:
    modules, optimizers, _ = _split(state)
    # The core's reader: `.metadata` and the non-tensor values are read with allow-lists unless
    # `weights_only=False`, and a missing or truncated shard is a CheckpointError naming the file.
    reader = SafeFileSystemReader(folder, weights_only=weights_only)
    saved = checkpoint_keys(reader)
    meta_file = folder / META_FILE
    meta: dict[str, Any] = (
        strategy.checkpoint_io.load_checkpoint(meta_file, weights_only=weights_only) if meta_file.is_file() else {}
    )
    _check_keys(state, saved | set(meta), strict)
    owners = {key: owner(opt, [*modules.values(), *strategy.modules], key) for key, opt in optimizers.items()}
    tensors: dict[str, Any] = {k: get_model_state_dict(m) for k, m in modules.items() if k in saved}
    tensors.update({k: get_optimizer_state_dict(owners[k], o) for k, o in optimizers.items() if k in saved})
    if tensors:
        # The reader and planner of the core: `.metadata` and the non-tensor values are read with allow-lists
        # unless `weights_only=False`, and a missing or truncated shard is a CheckpointError naming the file.
        reader = SafeFileSystemReader(folder, weights_only=weights_only)
        with dcp_errors(folder):
            dcp_load(tensors, storage_reader=reader, planner=safe_load_planner(reader, allow_partial_load=not strict))
    for key, module_state in tensors.items():
        if key in modules:
            set_model_state_dict(modules[key], module_state, options=StateDictOptions(strict=strict))
        else:
            set_optimizer_state_dict(owners[key], optimizers[key], module_state)
    for key, obj in list(state.items()):
        if key in modules or key in optimizers or key not in meta:
            continue
        value = meta.pop(key)
        if isinstance(obj, Stateful):
            obj.load_state_dict(value)
        else:
            state[key] = value
    return meta
