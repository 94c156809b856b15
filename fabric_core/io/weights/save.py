"""``fabric.save_raw``: a module's weights as a safetensors file, a Hugging Face folder or a torch file.

Every rank computes the same layout (the files, and each tensor's offsets in them) from the names, shapes
and dtypes alone. Global rank 0 creates the files at their full size under temporary names; then every rank
writes the bytes of the blocks it holds at their offsets (``os.pwrite``), in parallel, with nothing gathered;
then rank 0 puts the files in place. A folder keeps what else it holds (``config.json``, the tokenizer): only
the weight files and the index are written, and what makes the folder complete comes last (the index; or
``model.safetensors`` renamed into place when there is one file), after the previous save's index is gone.
A save killed at any point leaves no file or folder that loads as complete with a mix of two saves.

Object storage cannot take writes at offsets: there, each tensor is gathered whole (one at a time) and rank 0
streams the files through a local temporary folder, index last.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import torch

from fabric_core.errors import CheckpointError, PathIsADirectoryError
from fabric_core.io._remote import _url_to_fs, is_remote_url
from fabric_core.io.atomic import _fsync_directory, atomic_write, remove_stale_temps, temp_path_for
from fabric_core.io.weights.header import build_header, byte_runs, dtype_name, nbytes, raw_bytes
from fabric_core.io.weights.layout import INDEX, Shard, index_bytes, is_weight_file, plan_shards
from fabric_core.io.weights.pieces import Piece

__all__ = ["save_weights"]

_METADATA = {"format": "pt"}
_T = TypeVar("_T")


class _Ranks(Protocol):
    @property
    def is_global_zero(self) -> bool: ...

    def broadcast(self, obj: _T, src: int = 0) -> _T: ...

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool: ...


def save_weights(ranks: _Ranks, path: str, pieces: Sequence[Piece], kind: str, max_shard_size: int | None) -> None:
    """Write ``pieces`` to ``path`` as ``kind`` (``"safetensors"`` or ``"folder"``); call on every rank, then a
    barrier (rank 0 puts the files in place last: ``fabric.save_raw`` ends in one).

    Args:
        ranks: The strategy.
        path: A local path or a URL.
        pieces: This rank's pieces, the same weights in the same order on every rank.
        kind: One file, or a Hugging Face folder.
        max_shard_size: The folder's largest file, in bytes (``None``: one file).
    """
    for piece in pieces:
        dtype_name(piece.dtype)  # refused before anything is written, on every rank alike
    shards = plan_shards([(p.name, p.dtype, p.shape) for p in pieces], max_shard_size if kind == "folder" else None)
    layout = _Layout(shards)
    if is_remote_url(path):
        _save_remote(ranks, path, pieces, layout, kind)
        return
    target = Path(path)
    files = {shard.file: target / shard.file for shard in shards} if kind == "folder" else {shards[0].file: target}
    # Rank 0 names the temporary files (its host and pid are in the names, for the sweep of a later save).
    temps = {name: temp_path_for(final) for name, final in files.items()}
    problem = None
    if ranks.is_global_zero:
        try:
            _check_target(target, kind)
            _create(layout, files, temps)
        except (OSError, CheckpointError) as err:
            problem = err
    temps, failed = ranks.broadcast((temps, None if problem is None else str(problem)), src=0)
    if problem is not None:
        raise problem
    if failed is not None:
        raise CheckpointError(f"`fabric.save_raw({path!r})`: rank 0 could not create the files: {failed}", path=path)
    try:
        _write_blocks(pieces, layout, temps)
        failure = None
    except BaseException as err:
        failure = err
    ok = ranks.reduce_boolean_decision(failure is None, all=True)
    try:
        if not ok:
            if failure is not None:
                raise failure
            raise CheckpointError(f"`fabric.save_raw({path!r})`: another rank failed to write its part.", path=path)
        if ranks.is_global_zero:
            if kind == "folder":
                _commit_folder(target, shards, temps)
            else:
                os.replace(temps[shards[0].file], target)
                _fsync_directory(target.parent)
    finally:
        if ranks.is_global_zero:
            for temp in temps.values():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)


def _check_target(target: Path, kind: str) -> None:
    if kind == "folder" and target.exists() and not target.is_dir():
        raise CheckpointError(
            f"`fabric.save_raw({os.fspath(target)!r})` writes a Hugging Face folder, but a file is there. Remove it, "
            "or name a `.safetensors` file to write one file.",
            path=os.fspath(target),
        )
    if kind != "folder" and target.is_dir():
        raise PathIsADirectoryError(
            f"`fabric.save_raw({os.fspath(target)!r})` writes one file, but a folder is there: choose another path.",
            argument="path",
            value=os.fspath(target),
        )


class _Layout:
    """The files of a save, worked out once from names, shapes and dtypes: the same on every rank."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self.shards = shards
        self.headers = {shard.file: build_header(shard.tensors, _METADATA) for shard in shards}
        self.sizes: dict[str, int] = {}
        #: Each tensor's file and the absolute offset of its first byte there.
        self.starts: dict[str, tuple[str, int]] = {}
        for shard in shards:
            offset = len(self.headers[shard.file])
            for name, dtype, shape in shard.tensors:
                self.starts[name] = (shard.file, offset)
                offset += nbytes(dtype, shape)
            self.sizes[shard.file] = offset


def _create(layout: _Layout, files: dict[str, Path], temps: dict[str, Path]) -> None:
    """Create each file under its temporary name: its header, then its full size (sparse until written)."""
    for shard in layout.shards:
        final, temp = files[shard.file], temps[shard.file]
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(final)
        with open(temp, "xb") as file:
            file.write(layout.headers[shard.file])
            file.truncate(layout.sizes[shard.file])


def _as_bytes(tensor: torch.Tensor, dtype: torch.dtype) -> memoryview:
    """The bytes of ``tensor`` (on the CPU, as ``dtype``, row-major)."""
    return raw_bytes(tensor.detach().to(device="cpu", dtype=dtype).contiguous())


def _write_blocks(pieces: Sequence[Piece], layout: _Layout, temps: dict[str, Path]) -> None:
    """Write this rank's blocks into the files (every rank calls each piece's ``fetch``, in order)."""
    descriptors: dict[str, int] = {}
    try:
        for piece in pieces:
            data = piece.fetch()
            if data is None:
                continue
            file, start = layout.starts[piece.name]
            if file not in descriptors:
                try:
                    descriptors[file] = os.open(temps[file], os.O_WRONLY)
                except FileNotFoundError:
                    raise CheckpointError(
                        f"`fabric.save_raw`: this process cannot see {os.fspath(temps[file])!r}, which global rank 0 "
                        "created for it to write its shards into. Every rank writes into the same files, so the "
                        "path must be on a filesystem that every node mounts at the same path.",
                        path=os.fspath(temps[file]),
                        reason="not_shared",
                    ) from None
            raw = _as_bytes(data, piece.dtype)
            for at, offset, length in byte_runs(piece.shape, piece.offsets, piece.block, piece.dtype.itemsize):
                _pwrite_all(descriptors[file], raw[offset : offset + length], start + at)
        for descriptor in descriptors.values():
            os.fsync(descriptor)
    finally:
        for descriptor in descriptors.values():
            os.close(descriptor)


def _pwrite_all(descriptor: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(descriptor, data, offset)
        data, offset = data[written:], offset + written


def _commit_folder(folder: Path, shards: Sequence[Shard], temps: dict[str, Path]) -> None:
    """Put the new files in place: the old index goes first, the new index (or the one file) last."""
    index = folder / INDEX
    with contextlib.suppress(FileNotFoundError):
        os.unlink(index)
    new = {shard.file for shard in shards}
    for name in os.listdir(folder):
        if name not in new and is_weight_file(name):
            os.unlink(folder / name)  # the previous save's files, which the new index does not name
    _fsync_directory(folder)
    for shard in shards:
        os.replace(temps[shard.file], folder / shard.file)
    if len(shards) > 1:
        with atomic_write(index) as file:
            file.write(index_bytes(shards))
    _fsync_directory(folder)


# -- object storage ---------------------------------------------------------------------------------------
def _save_remote(ranks: _Ranks, url: str, pieces: Sequence[Piece], layout: _Layout, kind: str) -> None:
    """Rank 0 writes each file in a local temporary folder, tensor by tensor, and uploads it; index last."""
    shards = layout.shards
    fs, key = _url_to_fs(url)
    with _local_scratch(ranks.is_global_zero) as scratch:
        by_name = {piece.name: piece for piece in pieces}
        for shard in shards:
            local = scratch / shard.file if scratch is not None else None
            with open(local, "wb") if local is not None else contextlib.nullcontext() as file:
                if file is not None:
                    file.write(layout.headers[shard.file])
                for name, dtype, _ in shard.tensors:
                    data = by_name[name].fetch()  # collective where the strategy gathers: every rank calls it
                    if file is not None and data is not None:
                        file.write(_as_bytes(data, dtype))
        if scratch is not None:
            if kind == "safetensors":
                fs.put_file(os.fspath(scratch / shards[0].file), key)
            else:
                index = f"{key.rstrip('/')}/{INDEX}"
                if fs.exists(index):
                    fs.rm_file(index)
                for name in fs.ls(key, detail=False) if fs.exists(key) else []:
                    base = name.rstrip("/").rsplit("/", 1)[-1]
                    if base not in {s.file for s in shards} and is_weight_file(base):
                        fs.rm_file(name)
                for shard in shards:
                    fs.put_file(os.fspath(scratch / shard.file), f"{key.rstrip('/')}/{shard.file}")
                if len(shards) > 1:
                    fs.pipe_file(index, index_bytes(shards))
            fs.invalidate_cache()


@contextlib.contextmanager
def _local_scratch(active: bool) -> Iterator[Path | None]:
    if not active:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="fabric-core-save-raw-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
