"""Sharded (``torch.distributed.checkpoint``) checkpoint folders outside the strategy that wrote them.

A sharded checkpoint is a folder: the DCP files (``.metadata`` and one ``__<rank>_0.distcp`` per writer)
hold the model and optimizer tensors, and ``meta.pt`` (written by rank 0) holds everything else. Optimizer
state in the folder is keyed by parameter name (what ``torch.distributed.checkpoint.state_dict`` produces);
the functions here turn it into the usual ``optimizer.state_dict()`` form keyed by position, so that the
result loads into a plain model and optimizer in one process.

This module needs torch only (no process group, no FSDP), so any strategy — single-device and DDP included —
reads a sharded checkpoint, and ``fabric-core consolidate`` works without the plugin that wrote it. A folder in
object storage (``s3://bucket/ckpt``) is read in place through fsspec, with the same checks.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import torch

from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io._dcp import SafeFileSystemReader, dcp_errors, safe_load_planner
from fabric_core.io._file import read_open_file
from fabric_core.io._remote import read_remote, write_remote
from fabric_core.io.atomic import atomic_write, committed_path
from fabric_core.io.folder import Folder, read_one_folder
from fabric_core.io.locations import Location, exists, is_url, join, location
from fabric_core.utilities.types import PathLike

__all__ = [
    "META_FILE",
    "SafeFileSystemReader",
    "checkpoint_keys",
    "consolidate",
    "dcp_errors",
    "is_distributed_checkpoint",
    "load_distributed_checkpoint",
    "optimizer_state_by_name",
    "optimizer_state_by_position",
    "read_meta",
    "safe_load_planner",
]

#: The file of non-tensor values inside a sharded checkpoint folder.
META_FILE: Final = "meta.pt"
_DCP_METADATA: Final = ".metadata"


def is_distributed_checkpoint(path: PathLike) -> bool:
    """Whether ``path`` is a folder written by ``torch.distributed.checkpoint`` (it holds ``.metadata``)."""
    if is_url(path):
        return exists(join(path, _DCP_METADATA))
    return Path(path).is_dir() and (Path(path) / _DCP_METADATA).is_file()


def checkpoint_keys(path: PathLike | SafeFileSystemReader, *, weights_only: bool | None = None) -> set[str]:
    """The top-level keys of the state saved in the DCP folder ``path`` (without reading the tensors).

    ``path`` may be the reader that will load the folder: it keeps the metadata read here.

    Raises:
        CheckpointError: ``.metadata`` names a type DCP metadata does not consist of (unless
            ``weights_only=False``), or is damaged.
    """
    reader = path if isinstance(path, SafeFileSystemReader) else SafeFileSystemReader(path, weights_only=weights_only)
    metadata = reader.read_metadata()
    # DCP flattens nested state with "." between levels; the top-level key is what precedes the first dot,
    # unless a key itself has dots, which the planner data records exactly.
    planner_data = metadata.planner_data if isinstance(metadata.planner_data, Mapping) else {}
    keys: set[str] = set()
    for flat in metadata.state_dict_metadata:
        path_in_state = planner_data.get(flat)
        keys.add(str(path_in_state[0]) if path_in_state else flat.partition(".")[0])
    return keys


def _is_optimizer_state(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"state", "param_groups"}


def optimizer_state_by_position(state_dict: dict[str, Any]) -> dict[str, Any]:
    """Turn an optimizer state dict keyed by parameter name into ``optimizer.state_dict()``'s form.

    Positions follow the order of the names in ``param_groups`` (the optimizer's own order), so the result
    loads into an optimizer built over the same parameters in the same order. A state dict already keyed by
    position is returned unchanged.
    """
    names = [name for group in state_dict["param_groups"] for name in group["params"]]
    if not all(isinstance(name, str) for name in names):
        return state_dict
    position = {name: index for index, name in enumerate(names)}
    groups = []
    for group in state_dict["param_groups"]:
        groups.append({**group, "params": [position[name] for name in group["params"]]})
    state = {position[name]: value for name, value in state_dict["state"].items() if name in position}
    return {"state": state, "param_groups": groups}


def optimizer_state_by_name(state_dict: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of :func:`optimizer_state_by_position`: key the state by ``names[position]``.

    Args:
        state_dict: An ``optimizer.state_dict()``-style dict (integer positions). A dict already keyed by
            name is returned unchanged.
        names: The parameter name at each position of the target optimizer.

    Raises:
        CheckpointError: The saved optimizer has a different number of parameters.
    """
    positions = [p for group in state_dict["param_groups"] for p in group["params"]]
    if all(isinstance(p, str) for p in positions):
        return state_dict
    if len(positions) != len(names):
        raise CheckpointError(
            f"The checkpoint's optimizer state covers {len(positions)} parameters but the optimizer being "
            f"restored has {len(names)}. Build the optimizer over the same parameters as the one saved."
        )
    name_of = dict(zip(sorted(positions), names))
    groups = [{**group, "params": [name_of[p] for p in group["params"]]} for group in state_dict["param_groups"]]
    state = {name_of[p]: value for p, value in state_dict["state"].items()}
    return {"state": state, "param_groups": groups}


def load_distributed_checkpoint(path: PathLike, *, weights_only: bool | None = None) -> dict[str, Any]:
    """Read a whole sharded checkpoint folder into one dict of CPU tensors, in this process alone.

    Works with or without a process group and for any number of processes that wrote it. Optimizer states
    come back keyed by position (see :func:`optimizer_state_by_position`), and the entries of ``meta.pt`` are
    merged in.

    Args:
        path: The folder.
        weights_only: ``None``/``True``: ``.metadata`` may hold only the types DCP metadata consists of, and
            the shard files' non-tensor values and ``meta.pt`` only tensors and plain containers, so a crafted
            folder cannot run code. ``False``: unpickle anything (a folder you trust).

    Returns:
        The checkpoint as ``fabric.save`` was given it: ``{"model": state_dict, "optimizer": ..., ...}``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: ``path`` is not a sharded checkpoint folder, a file of it is missing, truncated or
            damaged (``reason="corrupt"``), or holds objects that ``weights_only`` refused (``"unsafe"``).
    """
    # Opened once and read through the descriptor: `.metadata`, the shards and `meta.pt` all come from one
    # folder while another process replaces it; a folder deleted under the read is read again from the path.
    try:
        return read_one_folder(path, lambda folder: _load_open_folder(folder, weights_only))
    except NotADirectoryError:
        raise _not_sharded(path if is_url(path) else committed_path(path)) from None


def _not_sharded(path: PathLike) -> CheckpointError:
    return CheckpointError(
        f"{os.fspath(path)!r} is not a sharded checkpoint folder: it has no {_DCP_METADATA!r} file written by "
        "`torch.distributed.checkpoint`.",
        path=os.fspath(path),
        reason="corrupt",
    )


def _load_open_folder(folder: Folder, weights_only: bool | None) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    metadata = join(folder.root, _DCP_METADATA)
    if not (metadata.is_file() if isinstance(metadata, Path) else exists(metadata)):
        raise _not_sharded(folder.path)
    loaded: dict[str, Any] = {}
    # The public `dcp.load` only fills keys the given dict already has; filling an empty dict from the
    # metadata is what torch's own `dcp_to_torch_save` does with these two.
    reader = SafeFileSystemReader(folder, weights_only=weights_only)
    reader.read_metadata()  # a refused or damaged `.metadata` raises here, clearly (see the reader)
    with dcp_errors(folder.path):
        _load_state_dict(loaded, storage_reader=reader, planner=safe_load_planner(reader, empty=True), no_dist=True)
    for key, value in list(loaded.items()):
        if _is_optimizer_state(value):
            loaded[key] = optimizer_state_by_position(value)
    loaded.update(read_meta(folder, weights_only))
    return loaded


def read_meta(folder: Folder, weights_only: bool | None, checkpoint_io: Any = None) -> dict[str, Any]:
    """The entries of the folder's ``meta.pt`` (``{}`` without one), read through the opened folder.

    Args:
        folder: The opened checkpoint folder.
        weights_only: How to unpickle (see :func:`load_distributed_checkpoint`).
        checkpoint_io: A checkpoint I/O that reads files its own way (it is given the file's name under the
            opened folder); ``None`` reads the opened file with the plain reader.

    Raises:
        FileNotFoundError: ``meta.pt`` is missing because the folder was deleted under the read (a retry
            of :func:`~fabric_core.io.folder.read_one_folder` reads the new one).
    """
    meta_file = join(folder.root, META_FILE)
    if checkpoint_io is not None:
        if not (meta_file.is_file() if isinstance(meta_file, Path) else exists(meta_file)):
            return _no_meta(folder)
        loaded: dict[str, Any] = checkpoint_io.load_checkpoint(meta_file, weights_only=weights_only)
        return loaded
    try:
        # Closed below, after the load.
        file = open(meta_file, "rb") if isinstance(meta_file, Path) else read_remote(meta_file)  # noqa: SIM115
    except FileNotFoundError:
        return _no_meta(folder)
    with file:
        return read_open_file(join(folder.path, META_FILE), file, None, weights_only, False)


def _no_meta(folder: Folder) -> dict[str, Any]:
    if folder.replaced():
        # Deleted under the read, perhaps: the folder read so far may have had one.
        raise FileNotFoundError(f"{os.fspath(join(folder.path, META_FILE))!r} vanished: the folder was replaced")
    return {}


def consolidate(folder: PathLike, output: PathLike | None = None, *, weights_only: bool | None = None) -> Location:
    """Turn a sharded checkpoint folder into one file that ``torch.load`` (and ``fabric.load``) reads anywhere.

    The file holds ``{"model": state_dict, "optimizer": state_dict, **extras}`` with plain CPU tensors;
    optimizer states are keyed by position, as ``optimizer.state_dict()`` is.

    Either may be a URL (``s3://bucket/ckpt``): the folder is read from the bucket in place, and an output URL is
    written there in one upload.

    Args:
        folder: The sharded checkpoint folder.
        output: The file to write; by default ``<folder>.consolidated`` next to the folder.
        weights_only: How the folder is read (see :func:`load_distributed_checkpoint`).

    Returns:
        The path written.

    Raises:
        InvalidConfigError: ``output`` exists already (it is never overwritten).
        FileNotFoundError: ``folder`` does not exist.
        CheckpointError: ``folder`` is not a sharded checkpoint folder, or cannot be read (see
            :func:`load_distributed_checkpoint`).
    """
    source = location(folder)
    if output is not None:
        target = location(output)
    elif isinstance(source, Path):
        target = source.with_name(source.name + ".consolidated")
    else:
        target = source.rstrip("/") + ".consolidated"
    if exists(target):
        raise InvalidConfigError(
            f"`consolidate({os.fspath(folder)!r}, output={os.fspath(target)!r})`: the output already exists and is "
            "never overwritten. Choose another output path or delete it first.",
            argument="output",
            value=os.fspath(target),
        )
    checkpoint = load_distributed_checkpoint(source, weights_only=weights_only)
    if isinstance(target, str):
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_remote(target, buffer.getvalue())
        return target
    with atomic_write(target) as file:
        torch.save(checkpoint, file)
    return target
