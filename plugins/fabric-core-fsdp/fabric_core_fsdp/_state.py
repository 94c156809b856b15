"""Saving and loading the state of sharded (DTensor) models: a DCP folder, or one full file from rank 0.

Shared by :class:`~fabric_core_fsdp.FSDPStrategy` and :class:`~fabric_core_fsdp.ModelParallelStrategy`.
Every function here is collective: all ranks call it with the same ``state``.
"""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io.async_io import AsyncCheckpointIO, snapshot_to_host, wait_for_saves
from fabric_core.io.atomic import (
    existing_committed_path,
    remove_stale_temps,
    replace_path,
    temp_path_for,
    write_folder_collectively,
    write_remote_folder_collectively,
)
from fabric_core.io.distributed import (
    META_FILE,
    SafeFileSystemReader,
    checkpoint_keys,
    dcp_errors,
    is_distributed_checkpoint,
    load_distributed_checkpoint,
    optimizer_state_by_name,
    optimizer_state_by_position,
    read_meta,
    safe_load_planner,
)
from fabric_core.io.folder import ATTEMPTS, Folder, RemoteFolder, gave_up, open_folder, vanished
from fabric_core.io.locations import Location, exists, is_dir, is_url, join, location, object_identity
from fabric_core.io.restore import check_requested_keys
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.strategies.strategy import LoadTarget, put_filtered
from fabric_core.utilities.types import StateFilter, Stateful

if TYPE_CHECKING:
    from fabric_core.strategies.parallel import ParallelStrategy

__all__ = ["LoneOptimizerFromFolderError", "NotACheckpointError", "load", "save_full", "save_sharded"]

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


class NotACheckpointError(CheckpointError, ValueError):
    """A folder that is not a sharded checkpoint, where one was to be loaded (a ``ValueError`` too, as in
    Lightning)."""


class LoneOptimizerFromFolderError(InvalidConfigError, NotImplementedError):
    """A lone optimizer to load from a sharded folder (a ``NotImplementedError`` too, as in Lightning)."""


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


def save_sharded(strategy: ParallelStrategy, path: str | os.PathLike[str], state: Mapping[str, Any]) -> None:
    """Write ``path`` as a folder: each rank writes its shards, rank 0 the metadata and ``meta.pt``.

    The folder is written under a temporary name and put in place in one step by rank 0 once every rank
    has finished (:func:`~fabric_core.io.atomic.write_folder_collectively`), so an interrupted save leaves
    the previous checkpoint or the new one at ``path``, never a mix and never nothing; the next save sweeps
    what a killed one left.

    A URL (``s3://bucket/ckpt``) is written in place through fsspec, keeping its form: ``meta.pt`` first, then
    the shards, then DCP's ``.metadata``, which makes it a checkpoint; the previous one there is deleted first,
    ``.metadata`` first (:func:`~fabric_core.io.atomic.write_remote_folder_collectively`).
    """
    modules, optimizers, extras = _split(state)
    tensors: dict[str, Any] = {key: get_model_state_dict(module) for key, module in modules.items()}
    for key, optimizer in optimizers.items():
        tensors[key] = get_optimizer_state_dict(owner(optimizer, modules.values(), key), optimizer)
    io = strategy.checkpoint_io
    if is_url(path):
        _save_sharded_remote(strategy, os.fspath(path), tensors, _plain(extras))
        return
    if isinstance(io, AsyncCheckpointIO):
        io.wait()  # on every rank: a failed previous save raises before this one starts
        if strategy.num_nodes == 1:
            _save_sharded_in_background(strategy, io, path, tensors, _plain(extras))
            return
        # Nodes may each have their own disk: the collective replace of `write_folder_collectively` is needed.
        io = io.checkpoint_io

    def write(temp: Path) -> None:
        dcp_save(tensors, checkpoint_id=temp)
        if strategy.is_global_zero:
            io.save_checkpoint(_plain(extras), temp / META_FILE)

    write_folder_collectively(strategy, path, write, "fsdp")


def _save_sharded_remote(strategy: ParallelStrategy, url: str, tensors: dict[str, Any], extras: dict[str, Any]) -> None:
    """The shards, ``meta.pt`` and ``.metadata`` straight into object storage (see :func:`save_sharded`).

    With an :class:`AsyncCheckpointIO`, ``meta.pt`` is written before the call returns (it holds plain values
    only) and the shards and ``.metadata`` in the background (``async_save``), still ``.metadata`` last.
    """
    io = strategy.checkpoint_io
    background = io if isinstance(io, AsyncCheckpointIO) else None
    if background is not None:
        background.wait()  # on every rank: a failed previous save raises before this one starts
    writer = background.checkpoint_io if background is not None else io

    def write(folder: str) -> None:
        if strategy.is_global_zero:
            writer.save_checkpoint(extras, join(folder, META_FILE))
        if background is None:
            dcp_save(tensors, checkpoint_id=folder)
            return
        response: Any = dcp_async_save(tensors, checkpoint_id=folder, process_group=_background_group(strategy))
        upload: Future[Any] = getattr(response, "upload_completion", response)
        background.submit(folder, upload.result)

    write_remote_folder_collectively(strategy, url, write, "fsdp")


# One gloo group per strategy for background saves: collectives of the training loop on the default group
# must never interleave with the save's, which run in another thread.
_background_groups: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _background_group(strategy: ParallelStrategy) -> Any:
    group = _background_groups.get(strategy)
    if group is None:
        group = dist.new_group(backend="gloo")  # collective: every rank is in this save
        _background_groups[strategy] = group
    return group


def _save_sharded_in_background(
    strategy: ParallelStrategy,
    io: AsyncCheckpointIO,
    path: str | os.PathLike[str],
    tensors: dict[str, Any],
    extras: dict[str, Any],
) -> None:
    """``torch.distributed.checkpoint.async_save`` into a temp folder that rank 0 puts in place when done.

    ``async_save`` copies every rank's shards to CPU memory before it returns; its background thread writes
    them, on a gloo group of its own. Rank 0's write ends only after every rank's shards are written (DCP's
    last step gathers their results), so rank 0 then writes ``meta.pt`` and renames the folder into place,
    still in the background: a process killed before leaves the previous checkpoint at ``path``.
    """
    target = Path(path)
    mine = ""
    if strategy.is_global_zero:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(target)
        mine = os.fspath(temp_path_for(target))
    temp = Path(strategy.broadcast(mine, src=0))
    meta = snapshot_to_host(extras) if strategy.is_global_zero else None
    response: Any = dcp_async_save(tensors, checkpoint_id=temp, process_group=_background_group(strategy))
    upload: Future[Any] = getattr(response, "upload_completion", response)
    inner, first = io.checkpoint_io, strategy.is_global_zero

    def finish() -> None:
        try:
            upload.result()
            if first:
                inner.save_checkpoint(meta or {}, temp / META_FILE)
                replace_path(temp, target)
        finally:
            if first and os.path.lexists(temp):
                shutil.rmtree(temp, ignore_errors=True)

    io.submit(target, finish)


def save_full(
    strategy: ParallelStrategy,
    path: str | os.PathLike[str],
    state: Mapping[str, Any],
    filter: StateFilter | None = None,
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
        strategy.checkpoint_io.save_checkpoint(checkpoint, location(path))


def load(
    strategy: ParallelStrategy,
    path: str | os.PathLike[str],
    state: LoadTarget,
    strict: bool = True,
    weights_only: bool | None = None,
    set_up: Sequence[Module] = (),
) -> dict[str, Any]:
    """Restore ``state`` from a sharded folder or a full file; return what ``state`` did not ask for.

    ``set_up`` are the modules the strategy has set up: an optimizer in ``state`` may belong to one of them.

    Raises:
        FileNotFoundError: Nothing at ``path``.
        KeyError: With ``strict``, ``state`` asks for a key the checkpoint lacks.
        InvalidConfigError: A lone module or optimizer with a folder (name it in a dict instead).
        NotACheckpointError: ``path`` is a folder but not a sharded checkpoint.
        CheckpointError: A file of the checkpoint is missing, truncated or damaged, or holds objects that
            ``weights_only`` refused.
    """
    wait_for_saves(strategy.checkpoint_io)  # a checkpoint still being written is read once it is complete
    # A local path may be, for a moment, the previous checkpoint's `.old` name (see `replace_path`).
    target: Location | None = (
        existing_committed_path(path) if not is_url(path) else (os.fspath(path) if exists(path) else None)
    )
    if target is None:
        raise FileNotFoundError(f"Checkpoint file not found: {os.fspath(path)}")
    sharded = is_distributed_checkpoint(target)
    folder = is_dir(target)
    name = type(strategy).__name__
    if isinstance(state, Optimizer) and folder:
        # DCP names optimizer state after the parameters of the model it belongs to, which a lone optimizer lacks.
        raise LoneOptimizerFromFolderError(
            f"Loading a single optimizer object from a checkpoint is not supported with {name} when the checkpoint "
            f"is a folder of shards: {os.fspath(path)!r}. Load it with its model, e.g. "
            "`fabric.load(path, {'model': model, 'optimizer': optimizer})`, or load the optimizer alone from a full "
            "checkpoint file.",
            argument="state",
            value=type(state).__name__,
        )
    if isinstance(state, Module) and folder:
        raise InvalidConfigError(
            f"The given path must be a single file containing the full state dict: {os.fspath(path)!r} is a folder. "
            "Load a sharded checkpoint with a dict naming what to restore, e.g. "
            "`fabric.load(path, {'model': model, 'optimizer': optimizer})`.",
            argument="path",
            value=os.fspath(path),
        )
    if folder and not sharded:
        # Without a state the call returns the whole checkpoint; Lightning's message for that call opens with it.
        opening = f"Got {name}.load_checkpoint(..., state={state!r}) but the path" if not state else "The path"
        raise NotACheckpointError(
            f"{opening} {os.fspath(path)!r} does not point to a valid checkpoint. Make sure the path points to either "
            "a directory with checkpoint shards (written by `torch.distributed.checkpoint`: it has a '.metadata' "
            "file), or a single file with a full checkpoint.",
            path=os.fspath(path),
            reason="corrupt",
        )
    if not state:
        if sharded:
            return load_distributed_checkpoint(path, weights_only=weights_only)
        loaded: dict[str, Any] = strategy.checkpoint_io.load_checkpoint(target, weights_only=weights_only)
        return loaded
    if isinstance(state, (Module, Optimizer)):
        checkpoint = strategy.checkpoint_io.load_checkpoint(target, weights_only=weights_only)
        key = "model" if isinstance(state, Module) else "optimizer"
        _restore_full({key: state}, {key: checkpoint}, strict, set_up)
        return {}
    if sharded:
        # From the path, not its committed name: a load racing a replace may have to start over from it.
        return _load_sharded(strategy, location(path), state, strict, weights_only, set_up)
    checkpoint = strategy.checkpoint_io.load_checkpoint(target, weights_only=weights_only)
    check_requested_keys(state, checkpoint, strict)
    return _restore_full(state, checkpoint, strict, set_up)


def _restore_full(
    state: dict[str, Any], checkpoint: dict[str, Any], strict: bool, set_up: Sequence[Module]
) -> dict[str, Any]:
    """Load full (unsharded) state dicts into sharded modules and optimizers; plain values into ``state``."""
    remainder = dict(checkpoint)
    modules = {k: v for k, v in state.items() if isinstance(v, Module)}
    candidates = [*modules.values(), *set_up]
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
    strategy: ParallelStrategy,
    path: Location,
    state: dict[str, Any],
    strict: bool,
    weights_only: bool | None,
    set_up: Sequence[Module],
) -> dict[str, Any]:
    """Restore ``state`` from the sharded folder at ``path``, every rank from the same checkpoint.

    Each rank opens the folder once and reads every file through it (:func:`open_folder`), so each rank
    reads one folder even while another process replaces it. That the ranks opened the same one is then
    checked, collectively, by the save's unique id in ``.metadata`` (the same on every node whatever the
    filesystem calls its inodes): if they differ, or a rank's folder was deleted before it opened all its
    files, every rank starts over from the path, up to :data:`ATTEMPTS` times.
    """
    modules, optimizers, _ = _split(state)
    owners = {key: owner(opt, [*modules.values(), *set_up], key) for key, opt in optimizers.items()}
    for attempt in range(1, ATTEMPTS + 1):
        folder: Folder | None = None
        try:
            saved: set[str] = set()
            meta: dict[str, Any] = {}
            token: str | None = None
            failure: CheckpointError | OSError | None = None
            try:
                folder = open_folder(path)
                # The core's reader: `.metadata` and the non-tensor values are read with allow-lists unless
                # `weights_only=False`, and a missing or truncated shard is a CheckpointError naming the file.
                reader = SafeFileSystemReader(folder, weights_only=weights_only)
                saved = checkpoint_keys(reader)
                io = strategy.checkpoint_io
                # The default reader reads `meta.pt` through the opened folder itself (its messages name the folder).
                own = None if type(io).load_checkpoint is TorchCheckpointIO.load_checkpoint else io
                meta = read_meta(folder, weights_only, own)
                token = _save_id(reader, folder)
            except (CheckpointError, OSError) as err:
                failure = err
            if not _agree(strategy, path, folder, token, failure, last=attempt == ATTEMPTS):
                continue
            assert folder is not None
            check_requested_keys(state, saved | set(meta), strict)
            tensors: dict[str, Any] = {k: get_model_state_dict(m) for k, m in modules.items() if k in saved}
            tensors.update({k: get_optimizer_state_dict(owners[k], o) for k, o in optimizers.items() if k in saved})
            if tensors:
                try:
                    with dcp_errors(folder.path):
                        planner = safe_load_planner(reader, allow_partial_load=not strict)
                        dcp_load(tensors, storage_reader=reader, planner=planner)
                except CheckpointError as err:
                    # DCP raises one rank's failure on every rank: all take the same branch here.
                    if not vanished(err) or not _any(strategy, folder.replaced()):
                        raise
                    if attempt == ATTEMPTS:
                        raise gave_up(path, ATTEMPTS) from err
                    continue
        finally:
            if folder is not None:
                folder.close()
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
    raise gave_up(path, ATTEMPTS)


def _save_id(reader: SafeFileSystemReader, folder: Folder) -> str:
    """What names the checkpoint a rank opened: the save's uuid in ``.metadata``.

    A folder whose metadata has none (written by another tool) is named by its ``.metadata`` file's inode,
    modification time and size: the same on every node of a network filesystem (the server's numbers), unlike
    the device number.
    """
    storage_meta = reader.read_metadata().storage_meta
    save_id = getattr(storage_meta, "save_id", None)
    if save_id:
        return str(save_id)
    if isinstance(folder, RemoteFolder):
        return str(object_identity(os.fspath(join(folder.root, ".metadata"))))
    status = os.stat(folder.root / ".metadata")
    return f"{status.st_ino}:{status.st_mtime_ns}:{status.st_size}"


def _gather(strategy: ParallelStrategy, obj: Any) -> list[Any]:
    if strategy.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: list[Any] = [None] * strategy.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def _any(strategy: ParallelStrategy, flag: bool) -> bool:
    return any(_gather(strategy, flag))


def _agree(
    strategy: ParallelStrategy,
    path: Location,
    folder: Folder | None,
    token: str | None,
    failure: CheckpointError | OSError | None,
    last: bool,
) -> bool:
    """Whether every rank opened the same checkpoint; ``False``: start over. Collective.

    Raises:
        CheckpointError, OSError: A rank could not read the folder for a reason other than its replacement
            (that rank's error on that rank, a ``CheckpointError`` naming it on the others).
    """
    if failure is None:
        replaced = False
    elif folder is None:  # the path vanished between two saves' renames, or there is nothing there at all
        there = exists(path) if isinstance(path, str) else existing_committed_path(path) is not None
        replaced = isinstance(failure, OSError) and there
    else:
        replaced = vanished(failure) and folder.replaced()
    views = _gather(strategy, (token, None if failure is None else str(failure), replaced))
    tokens = {view[0] for view in views if view[1] is None}
    if len(tokens) == 1 and all(view[1] is None for view in views):
        return True
    if not last and (len(tokens) > 1 or any(view[2] for view in views)):
        return False
    if failure is not None:
        raise failure
    rank, message = next(((r, v[1]) for r, v in enumerate(views) if v[1] is not None), (None, None))
    if rank is None:
        raise gave_up(path, ATTEMPTS)
    raise CheckpointError(
        f"Rank {rank} could not read the sharded checkpoint {os.fspath(path)!r}: {message}",
        path=os.fspath(path),
        reason="corrupt",
    )
