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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import torch

from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io._dcp import SafeFileSystemReader, dcp_errors, safe_load_planner
from fabric_core.io._file import read_open_file
from fabric_core.io._remote import read_remote, write_remote
from fabric_core.io.atomic import atomic_write, committed_path
from fabric_core.io.folder import Folder, read_one_folder
from fabric_core.io.locations import Location, exists, is_dir, is_url, join, location
from fabric_core.utilities.types import PathLike

if TYPE_CHECKING:
    from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

    from fabric_core.io.weights.pieces import Piece

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
#: How many bytes of weights a consolidation to safetensors reads from the folder at a time (one tensor if larger).
_BATCH_BYTES: Final = 512 * 2**20
_T = TypeVar("_T")


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


def consolidate(
    folder: PathLike,
    output: PathLike | None = None,
    *,
    weights_only: bool | None = None,
    model_key: str | None = None,
    max_shard_size: int | str | None = None,
) -> Location:
    """Turn a sharded checkpoint folder into one file that ``torch.load`` (and ``fabric.load``) reads anywhere,
    or into the model's weights as safetensors.

    What is written follows ``output``:

    - a path ending in ``.safetensors``: the model's weights alone, as one safetensors file;
    - a path ending in ``/``: the model's weights alone, as a Hugging Face folder (``model.safetensors``, or
      shards of at most ``max_shard_size`` beside ``model.safetensors.index.json``), which
      ``from_pretrained`` and ``fabric.load_raw`` read. The folder may exist already if it holds no weights
      (a ``config.json``, a tokenizer): those files are kept;
    - any other path: ``{"model": state_dict, "optimizer": state_dict, **extras}`` as one torch file, with
      plain CPU tensors; optimizer states are keyed by position, as ``optimizer.state_dict()`` is.

    The model's weights are the tensors of one module state dict of the checkpoint (an entry whose values are
    tensors under the module's parameter and buffer names; optimizer state and extras are left out), read
    from the folder a few hundred megabytes at a time, so they are never held whole. ``model_key`` names the
    entry; by default it is the only one, or ``"model"`` where there are several.

    Either path may be a URL (``s3://bucket/ckpt``): the folder is read from the bucket in place, and an output URL is
    written there (a torch file in one upload).

    Args:
        folder: The sharded checkpoint folder.
        output: Where to write; by default ``<folder>.consolidated`` next to the folder (a torch file).
        weights_only: How the folder is read (see :func:`load_distributed_checkpoint`).
        model_key: The checkpoint entry whose weights a safetensors output holds.
        max_shard_size: A folder output's largest file: bytes, or ``"5GB"``, ``"500MB"``, ``"2GiB"``
            (default ``"5GB"``, as ``save_pretrained``).

    Returns:
        The path written.

    Raises:
        InvalidConfigError: ``output`` exists already (it is never overwritten; a folder output: it holds
            weights, or is a file); ``model_key`` or ``max_shard_size`` is given for an output that has no use for
            it, or ``max_shard_size`` is not a size.
        FileNotFoundError: ``folder`` does not exist.
        CheckpointError: ``folder`` is not a sharded checkpoint folder, or cannot be read (see
            :func:`load_distributed_checkpoint`); for a safetensors output: no entry (or not ``model_key``)
            is a module state dict, several are and none is ``"model"``, or a weight's dtype has no
            safetensors name.
    """
    source = location(folder)
    call = f"`consolidate({os.fspath(folder)!r}, output={None if output is None else os.fspath(output)!r})`"
    kind = "torch" if output is None else _output_kind(output)
    if kind == "torch" and model_key is not None:
        raise InvalidConfigError(
            f"{call}: `model_key` picks the weights of a safetensors output; a torch file holds the whole checkpoint. "
            "End the output in `.safetensors` (one file) or `/` (a Hugging Face folder), or leave `model_key` out.",
            argument="model_key",
            value=model_key,
        )
    if kind != "folder" and max_shard_size is not None:
        raise InvalidConfigError(
            f"{call}: `max_shard_size` sizes the files of a Hugging Face folder, and this output is one file. End "
            "the output in `/` to write a folder, or leave `max_shard_size` out.",
            argument="max_shard_size",
            value=max_shard_size,
        )
    if output is not None:
        target = location(output)
        if isinstance(target, str):
            target = target.rstrip("/") if kind == "folder" else target
    elif isinstance(source, Path):
        target = source.with_name(source.name + ".consolidated")
    else:
        target = source.rstrip("/") + ".consolidated"
    if kind == "folder":
        from fabric_core.io.weights.layout import DEFAULT_SHARD_SIZE, parse_shard_size

        shard_bytes: int | None = parse_shard_size(DEFAULT_SHARD_SIZE if max_shard_size is None else max_shard_size)
        _check_weights_folder(target, call)
    else:
        shard_bytes = None
        if exists(target):
            raise InvalidConfigError(
                f"{call}: the output already exists and is never overwritten. Choose another output path or delete "
                "it first.",
                argument="output",
                value=os.fspath(target),
            )
    if kind != "torch":
        _write_model_weights(source, target, kind, weights_only, model_key, shard_bytes)
        return target
    checkpoint = load_distributed_checkpoint(source, weights_only=weights_only)
    if isinstance(target, str):
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_remote(target, buffer.getvalue())
        return target
    with atomic_write(target) as file:
        torch.save(checkpoint, file)
    return target


# -- consolidation to safetensors: the model's weights only, read a batch at a time ------------------------------


def _output_kind(output: PathLike) -> str:
    """What :func:`consolidate` writes to ``output``: ``"safetensors"``, ``"folder"`` or ``"torch"``."""
    text = os.fspath(output)
    if text.endswith(("/", os.sep)):
        return "folder"
    if text.lower().endswith(".safetensors"):
        return "safetensors"
    return "torch"


def _is_weight_file(name: str) -> bool:
    from fabric_core.io.weights.layout import INDEX, is_weight_file

    return name == INDEX or is_weight_file(name)


def _check_weights_folder(target: Location, call: str) -> None:
    """Refuse a folder output that is a file or already holds a model's weights (never overwritten)."""
    if not exists(target):
        return
    if not is_dir(target):
        raise InvalidConfigError(
            f"{call}: a Hugging Face folder was asked for (the output ends in `/`), but a file is there; it is never "
            "overwritten. Choose another output path or delete it first.",
            argument="output",
            value=os.fspath(target),
        )
    if isinstance(target, Path):
        names = [entry.name for entry in target.iterdir()]
    else:
        from fabric_core.io._remote import list_files

        names = list_files(target)
    weights = sorted(name for name in names if _is_weight_file(name))
    if weights:
        raise InvalidConfigError(
            f"{call}: the folder already holds weights ({', '.join(weights)}), which are never overwritten. Choose "
            "another folder or delete them first (the folder's other files are kept).",
            argument="output",
            value=os.fspath(target),
        )


class _OneProcess:
    """The collectives ``save_weights`` calls, for this process alone."""

    @property
    def is_global_zero(self) -> bool:
        return True

    def broadcast(self, obj: _T, src: int = 0) -> _T:
        return obj

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision


def _write_model_weights(
    source: Location, target: Location, kind: str, weights_only: bool | None, model_key: str | None, shard: int | None
) -> None:
    from fabric_core.io.weights.save import save_weights

    def write(folder: Folder) -> None:
        metadata_file = join(folder.root, _DCP_METADATA)
        if not (metadata_file.is_file() if isinstance(metadata_file, Path) else exists(metadata_file)):
            raise _not_sharded(folder.path)
        reader = SafeFileSystemReader(folder, weights_only=weights_only)
        metadata = reader.read_metadata()  # a refused or damaged `.metadata` raises here, clearly
        key, tensors = _module_entry(metadata, model_key, folder.path)
        pieces = _Batches(reader, folder.path, key, tensors).pieces()
        save_weights(_OneProcess(), os.fspath(target), pieces, kind, shard)

    try:
        read_one_folder(source, write)
    except NotADirectoryError:
        raise _not_sharded(source if is_url(source) else committed_path(source)) from None


def _module_entry(
    metadata: Metadata, model_key: str | None, shown: PathLike
) -> tuple[str, list[tuple[str, TensorStorageMetadata]]]:
    """The entry of the checkpoint to write and its tensors (name in the module, metadata), in the saved order.

    A module state dict is an entry with tensors directly under it (``("model", "layer.weight")``) that is not
    an optimizer's state (``state``/``param_groups``).

    Raises:
        CheckpointError: No such entry, ``model_key`` is not one, or several are and none is ``"model"``.
    """
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    planner_data = metadata.planner_data if isinstance(metadata.planner_data, Mapping) else {}
    entries: dict[str, list[tuple[str, TensorStorageMetadata]]] = {}
    inner: dict[str, set[str]] = {}
    for flat, item in metadata.state_dict_metadata.items():
        found = planner_data.get(flat)
        path = tuple(found) if found else tuple(flat.split(".", 1))
        top = str(path[0])
        entries.setdefault(top, [])
        if len(path) > 1:
            inner.setdefault(top, set()).add(str(path[1]))
        if len(path) == 2 and isinstance(path[1], str) and isinstance(item, TensorStorageMetadata):
            entries[top].append((path[1], item))
    modules = [k for k, v in entries.items() if v and not inner.get(k, set()) <= {"state", "param_groups"}]
    keys = ", ".join(repr(k) for k in entries)
    where = f"The checkpoint {os.fspath(shown)!r}"
    if model_key is not None:
        if model_key not in modules:
            what = "has no entry" if model_key not in entries else "has no module state dict under"
            raise CheckpointError(
                f"{where} {what} {model_key!r}; its module state dicts: {', '.join(map(repr, modules)) or 'none'} "
                f"(all its entries: {keys}).",
                path=os.fspath(shown),
            )
        key = model_key
    elif len(modules) == 1:
        key = modules[0]
    elif "model" in modules:
        key = "model"
    elif not modules:
        raise CheckpointError(
            f"{where} holds no module state dict (an entry of tensors under parameter names) to write as safetensors; "
            f"its entries: {keys}.",
            path=os.fspath(shown),
        )
    else:
        raise CheckpointError(
            f"{where} holds several module state dicts ({', '.join(map(repr, modules))}) and none is named 'model': "
            "choose one with `--model-key KEY` (`model_key=` in Python).",
            path=os.fspath(shown),
        )
    from fabric_core.io.weights.header import dtype_name
    from fabric_core.io.weights.pieces import canonical

    seen: dict[str, str] = {}
    for name, item in entries[key]:
        try:
            dtype_name(item.properties.dtype)
        except TypeError as err:
            raise CheckpointError(f"{where}: {key}[{name!r}]: {err}", path=os.fspath(shown)) from None
        other = seen.setdefault(canonical(name), name)
        if other != name:
            raise CheckpointError(
                f"{where}: {key}[{other!r}] and {key}[{name!r}] have the same name without wrapper prefixes "
                f"({canonical(name)!r}); a safetensors file cannot hold both.",
                path=os.fspath(shown),
            )
    return key, entries[key]


class _Batches:
    """The pieces of one checkpoint entry, whose tensors are read from the folder a batch at a time on first fetch.

    ``save_weights`` fetches the pieces in order, once each: a batch is read when its first piece is fetched,
    and each tensor is let go once fetched, so no more than about :data:`_BATCH_BYTES` are held at once.
    """

    def __init__(
        self, reader: SafeFileSystemReader, shown: PathLike, key: str, tensors: list[tuple[str, TensorStorageMetadata]]
    ) -> None:
        from fabric_core.io.weights.header import nbytes

        self.reader, self.shown, self.key, self.tensors = reader, shown, key, tensors
        self.batch_of: list[int] = []
        self.batches: list[list[int]] = []
        used = 0
        for index, (_, item) in enumerate(tensors):
            size = nbytes(item.properties.dtype, item.size)
            if not self.batches or (used + size > _BATCH_BYTES and self.batches[-1]):
                self.batches.append([])
                used = 0
            self.batches[-1].append(index)
            self.batch_of.append(len(self.batches) - 1)
            used += size
        self.current = -1
        self.loaded: dict[int, torch.Tensor] = {}

    def pieces(self) -> list[Piece]:
        from fabric_core.io.weights.pieces import Piece, canonical

        pieces = []
        for index, (name, item) in enumerate(self.tensors):
            shape = tuple(item.size)
            pieces.append(
                Piece(canonical(name), item.properties.dtype, shape, (0,) * len(shape), shape, self._fetcher(index))
            )
        return pieces

    def _fetcher(self, index: int) -> Callable[[], torch.Tensor | None]:
        return lambda: self.fetch(index)

    def fetch(self, index: int) -> torch.Tensor:
        batch = self.batch_of[index]
        if batch != self.current:
            self.loaded = {}  # let the previous batch go before reading the next
            self.loaded = self._read(self.batches[batch])
            self.current = batch
        return self.loaded.pop(index)

    def _read(self, indices: list[int]) -> dict[int, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        empty = {
            self.tensors[i][0]: torch.empty(self.tensors[i][1].size, dtype=self.tensors[i][1].properties.dtype)
            for i in indices
        }
        with dcp_errors(self.shown):
            _load_state_dict(
                {self.key: empty}, storage_reader=self.reader, planner=safe_load_planner(self.reader), no_dist=True
            )
        return {i: empty[self.tensors[i][0]] for i in indices}
