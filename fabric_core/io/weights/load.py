"""``fabric.load_raw`` of a safetensors file or a Hugging Face folder: each rank reads only the bytes it holds.

Everything is checked before the module is touched: every header (:func:`~.header.read_header`), the index
against the files (a missing shard, a tensor in two files, a tensor the index does not list), the names
(wrapper prefixes aside) and the shapes. Then each block is read from its byte runs (``readinto``, no
mapping) straight into the rank's own tensor when the dtypes agree, through one temporary tensor of the
block's size when they differ (cast as ``load_state_dict`` casts). A rank therefore adds at most one block
of memory while loading. Nothing is unpickled.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, NamedTuple

import torch

from fabric_core.errors import CheckpointError
from fabric_core.io._remote import _url_to_fs, is_remote_url
from fabric_core.io.weights.header import Entry, Header, byte_runs, raw_bytes, read_header
from fabric_core.io.weights.layout import INDEX, SINGLE, read_index
from fabric_core.io.weights.pieces import Piece, canonical

__all__ = ["LoadResult", "WeightsMismatchError", "is_weights_path", "load_weights", "open_weights"]


class LoadResult(NamedTuple):
    """What a non-strict load left out, as ``Module.load_state_dict`` returns it."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class WeightsMismatchError(CheckpointError, RuntimeError):
    """The file's tensors do not fit the module: names missing or unexpected, or shapes that differ.

    A ``RuntimeError`` as ``Module.load_state_dict``'s. Nothing was loaded.
    """

    def __init__(self, message: str, *, path: str, missing: Sequence[str], unexpected: Sequence[str]) -> None:
        super().__init__(message, path=path, reason="mismatch")
        self.missing = list(missing)
        self.unexpected = list(unexpected)


def is_weights_path(path: str) -> bool:
    """Whether ``path`` is a safetensors file or a folder of them (``model.safetensors``, shards, an index)."""
    text = os.fspath(path)
    if text.rstrip("/").lower().endswith(".safetensors"):
        return True
    if is_remote_url(text):
        fs, key = _url_to_fs(text)
        if not fs.isdir(key):
            return False
        names = [name.rstrip("/").rsplit("/", 1)[-1] for name in fs.ls(key, detail=False)]
    elif os.path.isdir(text):
        names = os.listdir(text)
    else:
        return False
    return any(name == INDEX or name.endswith(".safetensors") for name in names)


@dataclass
class _Files:
    """The opened files of a file or folder, and a way to open more by name."""

    location: str
    opener: Callable[[str], IO[bytes]]
    size: Callable[[str], int]
    opened: dict[str, IO[bytes]]

    def open(self, name: str) -> IO[bytes]:
        if name not in self.opened:
            self.opened[name] = self.opener(name)
        return self.opened[name]

    def close(self) -> None:
        for file in self.opened.values():
            file.close()


@contextlib.contextmanager
def open_weights(path: str) -> Iterator[tuple[str, dict[str, tuple[Header, Entry]], dict[str, IO[bytes]]]]:
    """Open and check a safetensors file or Hugging Face folder.

    Yields:
        ``(where, {tensor name: (header, entry)}, {header's file: its open file})``.

    Raises:
        FileNotFoundError: Nothing at ``path``, or a folder without ``model.safetensors`` or its index.
        CheckpointError: A damaged file or an index that does not fit the files (named).
    """
    text = os.fspath(path)
    files = _files(text)
    try:
        found = _read_all(files, text)
        handles = {header.file: files.opened[header.key] for header, _ in found.values()}
        yield text, found, handles
    finally:
        files.close()


def _files(text: str) -> _Files:
    single = text.rstrip("/").lower().endswith(".safetensors")
    if is_remote_url(text):
        fs, key = _url_to_fs(text)
        fs.invalidate_cache()
        base = key if single else key.rstrip("/")

        def where(name: str) -> str:
            return base if single else f"{base}/{name}"

        return _Files(text, lambda name: fs.open(where(name), "rb"), lambda name: int(fs.size(where(name))), {})

    def local(name: str) -> str:
        return text if single else os.path.join(text, name)

    return _Files(text, lambda name: open(local(name), "rb"), lambda name: os.path.getsize(local(name)), {})


def _read_all(files: _Files, text: str) -> dict[str, tuple[Header, Entry]]:
    if text.rstrip("/").lower().endswith(".safetensors"):
        try:
            header = _header(files, SINGLE, text)
        except FileNotFoundError:
            raise FileNotFoundError(f"`fabric.load_raw`: no safetensors file at {text!r}.") from None
        return {name: (header, entry) for name, entry in header.entries.items()}
    try:
        weight_map = read_index(files.open, INDEX)
    except FileNotFoundError:
        weight_map = None
    if weight_map is None:
        try:
            header = _header(files, SINGLE, f"{text.rstrip('/')}/{SINGLE}")
        except FileNotFoundError:
            raise FileNotFoundError(
                f"`fabric.load_raw({text!r})`: the folder has neither {INDEX!r} nor {SINGLE!r}: it is not a Hugging "
                "Face weights folder, or its save did not complete."
            ) from None
        return {name: (header, entry) for name, entry in header.entries.items()}
    found: dict[str, tuple[Header, Entry]] = {}
    index_name = f"{text.rstrip('/')}/{INDEX}"
    for file in sorted(set(weight_map.values())):
        shown = f"{text.rstrip('/')}/{file}"
        try:
            header = _header(files, file, shown)
        except FileNotFoundError:
            raise CheckpointError(
                f"{index_name!r} names the shard {file!r}, which is missing: the folder is incomplete.",
                path=shown,
                reason="corrupt",
            ) from None
        for name, entry in header.entries.items():
            if name in found:
                raise CheckpointError(
                    f"Tensor {name!r} is in two files of {text!r}: {found[name][0].file!r} and {shown!r}.",
                    path=shown,
                    reason="corrupt",
                )
            if weight_map.get(name) != file:
                raise CheckpointError(
                    f"{shown!r} holds tensor {name!r}, which {index_name!r} "
                    + (f"places in {weight_map[name]!r}." if name in weight_map else "does not list."),
                    path=shown,
                    reason="corrupt",
                )
            found[name] = (header, entry)
    for name, file in weight_map.items():
        if name not in found:
            raise CheckpointError(
                f"{index_name!r} places tensor {name!r} in {file!r}, which does not hold it.",
                path=f"{text.rstrip('/')}/{file}",
                reason="corrupt",
            )
    return found


def _header(files: _Files, name: str, shown: str) -> Header:
    return read_header(files.open(name), files.size(name), shown, key=name)


def load_weights(path: str, targets: Sequence[Piece], strict: bool) -> LoadResult:
    """Read the weights at ``path`` into ``targets`` (this rank's blocks); see the module docstring.

    Raises:
        WeightsMismatchError: Names that do not match (with ``strict``), or shapes that differ; nothing loaded.
    """
    with open_weights(path) as (where, found, handles):
        by_name: dict[str, tuple[Header, Entry]] = {}
        for name, value in found.items():
            key = canonical(name)
            if key in by_name:
                raise CheckpointError(
                    f"{where!r} holds {by_name[key][1].name!r} and {name!r}, the same weight once wrapper prefixes "
                    "are set aside.",
                    path=where,
                    reason="corrupt",
                )
            by_name[key] = value
        plan, missing = _match(where, targets, by_name)
        unexpected = sorted(set(by_name) - {piece.name for piece in targets})
        if strict and (missing or unexpected):
            raise WeightsMismatchError(
                f"`fabric.load_raw({where!r})` does not fit the module; nothing was loaded."
                + (f" Missing in the file: {', '.join(map(repr, missing))}." if missing else "")
                + (f" Not in the module: {', '.join(map(repr, unexpected))}." if unexpected else "")
                + " Pass `strict=False` to load the tensors that match.",
                path=where,
                missing=missing,
                unexpected=unexpected,
            )
        for piece, header, entry in plan:
            _read_block(handles[header.file], piece, entry)
    return LoadResult(missing, unexpected)


def _match(
    where: str, targets: Sequence[Piece], by_name: dict[str, tuple[Header, Entry]]
) -> tuple[list[tuple[Piece, Header, Entry]], list[str]]:
    """What to read into which target, and the targets the file lacks (a tied weight present under another
    name is not lacking)."""
    plan: list[tuple[Piece, Header, Entry]] = []
    done: set[tuple[int, int] | None] = set()
    missing: list[str] = []
    mismatched: list[str] = []
    for piece in targets:
        value = by_name.get(piece.name)
        if value is None:
            missing.append(piece.name)
            continue
        header, entry = value
        if entry.shape != piece.shape:
            mismatched.append(
                f"{piece.name!r}: the file's shape is {list(entry.shape)}, the module's {list(piece.shape)}"
            )
            continue
        if piece.tensor is not None:
            done.add(_identity(piece.tensor))
            plan.append((piece, header, entry))
    if mismatched:
        raise WeightsMismatchError(
            f"`fabric.load_raw({where!r})`: shapes differ, so nothing was loaded: {'; '.join(mismatched)}.",
            path=where,
            missing=[],
            unexpected=[],
        )
    by_piece = {piece.name: piece for piece in targets}
    lacking = [
        name for name in missing if by_piece[name].tensor is None or _identity(by_piece[name].tensor) not in done
    ]
    return plan, lacking


def _identity(tensor: torch.Tensor | None) -> tuple[int, int] | None:
    if tensor is None:
        return None
    return tensor.untyped_storage().data_ptr(), int(tensor.storage_offset())


def _read_block(file: IO[bytes], piece: Piece, entry: Entry) -> None:
    """Read ``piece``'s block of ``entry`` from ``file`` into ``piece.tensor``."""
    target = piece.tensor
    assert target is not None
    if piece.rows is not None:
        whole = torch.empty(entry.shape, dtype=entry.dtype)
        _read_into(file, whole, piece, entry)
        for dim, rows in enumerate(piece.rows):
            whole = whole.index_select(dim, rows)
        with torch.no_grad():
            target.copy_(whole)
        return
    if tuple(target.shape) != piece.block:
        raise CheckpointError(
            f"{piece.name!r}: this rank holds a block of shape {list(target.shape)}, expected {list(piece.block)}.",
            reason="mismatch",
        )
    direct = target.device.type == "cpu" and target.is_contiguous() and target.dtype == entry.dtype
    buffer = target if direct else torch.empty(piece.block, dtype=entry.dtype)
    _read_into(file, buffer, piece, entry)
    if not direct:
        with torch.no_grad():
            target.copy_(buffer)


def _read_into(file: IO[bytes], buffer: torch.Tensor, piece: Piece, entry: Entry) -> None:
    """Read ``piece``'s block of ``entry`` into the contiguous CPU tensor ``buffer`` of the file's dtype."""
    view = raw_bytes(buffer)
    for at, offset, length in byte_runs(entry.shape, piece.offsets, piece.block, entry.itemsize):
        file.seek(entry.start + at)
        _readinto_all(file, view[offset : offset + length], entry)


def _readinto_all(file: IO[bytes], view: memoryview, entry: Entry) -> None:
    while view:
        count = file.readinto(view)  # type: ignore[attr-defined]
        if not count:
            raise CheckpointError(f"{entry.name!r}: the file ended early while reading it.", reason="corrupt")
        view = view[count:]
