"""Checkpoints written by ``torch.save``: atomic on save, safe by default on load.

:class:`TorchCheckpointIO` is the dispatch: it decides whether a path is a URL (:mod:`fabric_core.io._remote`),
a sharded folder (:mod:`fabric_core.io.distributed`) or a single file, which the plain reader
(:mod:`fabric_core.io._file`) reads. Those modules never import this one.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Final

import torch

from fabric_core.errors import CheckpointError, CheckpointSpaceError, InvalidConfigError
from fabric_core.io._file import read_open_file
from fabric_core.io._remote import _URL, is_remote_url, read_remote, remove_remote, write_remote
from fabric_core.io.atomic import atomic_write, existing_committed_path
from fabric_core.io.checkpoint_io import CheckpointIO
from fabric_core.utilities.apply_func import apply_to_collection
from fabric_core.utilities.types import PathLike

__all__ = ["TorchCheckpointIO", "atomic_write"]

_NO_SPACE: Final = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})  # no EDQUOT on Windows


def _local_path(path: PathLike, method: str) -> Path:
    """``path`` as a local ``Path`` (a ``file://`` URL included); other URLs go through `_remote` first."""
    text = os.fspath(path)
    if text.lower().startswith("file://"):
        return Path(text[len("file://") :])
    if _URL.match(text):  # pragma: no cover - callers send URLs to the fsspec branch first
        raise InvalidConfigError(
            f"`TorchCheckpointIO.{method}({text!r})`: not a local path.", argument="path", value=text
        )
    return Path(text)


def _remote(path: PathLike) -> str | None:
    """The URL, if ``path`` names a file on another filesystem than the local one (``s3://``, ``memory://``)."""
    text = os.fspath(path)
    return text if is_remote_url(text) else None


def _out_of_space(err: BaseException) -> bool:
    """Whether ``err`` (or what it was raised from) is a write that found the device full or over quota."""
    # torch.save turns the file's OSError into "[enforce fail at inline_container.cc] unexpected pos", with
    # the OSError as its context.
    seen: BaseException | None = err
    for _ in range(8):  # a short chain; a cycle must not loop
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _NO_SPACE:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _no_space(target: Path, checkpoint: Any) -> CheckpointSpaceError:
    storages: dict[tuple[str, int], int] = {}

    def count(tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        storages[(tensor.device.type, storage.data_ptr())] = storage.nbytes()

    apply_to_collection(checkpoint, torch.Tensor, count)
    needed = sum(storages.values())
    try:
        status = os.statvfs(target.parent)
        free: int | None = status.f_bavail * status.f_frsize
    except (OSError, AttributeError):  # no statvfs on Windows
        free = None
    free_text = "unknown" if free is None else f"{free:,}"
    return CheckpointSpaceError(
        f"No space left on device while writing {os.fspath(target)!r} (about {needed:,} bytes needed, "
        f"{free_text} free). The previous checkpoint there, if any, is unchanged and no partial file was "
        "left; free some space or save to another device.",
        path=os.fspath(target),
        needed=needed,
        free=free,
    )


@contextlib.contextmanager
def _crc32_off() -> Iterator[None]:
    """Turn off ``torch.save``'s per-record CRC32s in this thread for the block (torch's setting is per thread)."""
    get = getattr(torch.serialization, "get_crc32_options", None)
    put = getattr(torch.serialization, "set_crc32_options", None)
    if get is None or put is None:  # torch < 2.6 always computes them
        yield
        return
    previous = get()
    put(False)
    try:
        yield
    finally:
        put(previous)


class TorchCheckpointIO(CheckpointIO):
    """Saves with ``torch.save`` through :func:`atomic_write` and loads with ``torch.load``.

    Args:
        zip_crc32: Write the zip archive's CRC32 checksums. ``torch.load`` never verifies them, and
            computing them is half the time of a ``torch.save``: by default they are left out (written as
            zero), which pays for the fsync that makes the save durable. Turn them on for files that zip
            tools (``unzip -t``, Python's ``zipfile``) must be able to verify.
    """

    #: ``load_checkpoint(..., mmap=True)`` maps the file (see there).
    supports_mmap: ClassVar[bool] = True
    #: Also the default of subclasses whose ``__init__`` does not call this one's.
    zip_crc32: bool = False

    def __init__(self, *, zip_crc32: bool = False) -> None:
        self.zip_crc32 = zip_crc32

    def __repr__(self) -> str:
        return f"{type(self).__name__}(zip_crc32={self.zip_crc32})"

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None) -> None:
        """Write ``checkpoint`` to ``path`` atomically.

        The data goes to a temp file in the same folder, which is fsynced and renamed onto ``path``; if
        anything fails part-way the temp file is removed and an existing file at ``path`` is untouched.
        The zip records carry no CRC32s unless ``zip_crc32=True`` (see the class).

        Args:
            checkpoint: What to save (tensors, state dicts, plain Python values).
            path: The file to write; missing parent folders are created.
            storage_options: Not supported; must be ``None``.

        Raises:
            TypeError: ``storage_options`` was given.
            InvalidConfigError: ``path`` is a URL whose filesystem is not installed (e.g. ``s3://`` without
                ``s3fs``).
            CheckpointSpaceError: The device filled up (also an ``OSError`` with ``errno.ENOSPC``); the
                message says about how many bytes were needed and how many are free.
        """
        if storage_options is not None:
            raise TypeError(
                f"`{type(self).__name__}.save_checkpoint(..., storage_options={storage_options!r})`: "
                "`storage_options` is not supported by this CheckpointIO. Pass `storage_options=None`, or "
                "use a CheckpointIO plugin that takes options."
            )
        url = _remote(path)
        if url is not None:
            self._save_remote(checkpoint, url)
            return
        target = _local_path(path, "save_checkpoint")
        try:
            with atomic_write(target) as file, contextlib.nullcontext() if self.zip_crc32 else _crc32_off():
                # Straight into the open file: no second in-memory copy of the serialised checkpoint.
                torch.save(checkpoint, file)
        except (RuntimeError, OSError) as err:
            if _out_of_space(err):
                # The temp file is gone already (atomic_write), so "free" is what the device has for a retry.
                raise _no_space(target, checkpoint) from err
            raise

    def _save_remote(self, checkpoint: dict[str, Any], url: str) -> None:
        buffer = io.BytesIO()
        with contextlib.nullcontext() if self.zip_crc32 else _crc32_off():
            torch.save(checkpoint, buffer)
        write_remote(url, buffer.getvalue())

    def load_checkpoint(
        self, path: PathLike, map_location: Any = None, weights_only: bool | None = None, *, mmap: bool = False
    ) -> dict[str, Any]:
        """Read a checkpoint written by :meth:`save_checkpoint` (or by ``torch.save``).

        A URL (``s3://``, ``memory://``, any protocol fsspec knows) is read whole into memory first, and
        loaded with the same default safety as a local file; a sharded checkpoint folder there is read in
        place, as a local one is.

        Args:
            path: The checkpoint file.
            map_location: Where to put the tensors (see ``torch.load``); ``None`` keeps them on the CPU.
            weights_only: ``None`` or ``True`` builds only tensors, plain containers and the types torch
                allows, so an untrusted file cannot run code; ``False`` unpickles anything (trusted files
                only).
            mmap: Map the file instead of reading it: CPU tensors then share the file's pages
                (copy-on-write) instead of each being read into memory first, and whatever keeps one past
                the load should copy it (the mapping holds the file's blocks until it is gone).
                ``fabric.load`` does this for modules, which copy what they load into their own tensors.
                Files in torch's pre-1.6 format, and files that cannot be mapped, are read as usual.

        Returns:
            The saved object.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            CheckpointError: The file is truncated or not a checkpoint (``reason="corrupt"``), or it holds
                objects ``weights_only`` refused (``reason="unsafe"``).
        """
        url = _remote(path)
        if url is not None:
            try:
                data = read_remote(url)
            except CheckpointError:
                # A folder: a sharded checkpoint in object storage is read in place, as a local one is.
                from fabric_core.io.distributed import is_distributed_checkpoint, load_distributed_checkpoint

                if is_distributed_checkpoint(url):
                    return load_distributed_checkpoint(url, weights_only=weights_only)
                raise
            return read_open_file(url, data, map_location, weights_only, mmap=False)
        # For a moment of a folder replace on filesystems that cannot swap names, the previous checkpoint has
        # an `.old` name (see `replace_path`).
        target = existing_committed_path(_local_path(path, "load_checkpoint"))
        if target is None:
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        if target.is_dir():
            # Only here: the sharded reader imports torch.distributed.checkpoint and DTensor (most of a second),
            # which a run that only ever saves and loads single files never needs.
            from fabric_core.io.distributed import is_distributed_checkpoint, load_distributed_checkpoint

            if is_distributed_checkpoint(target):
                # A sharded checkpoint read whole into this process: any strategy can resume from one. Given
                # the path, not its committed name, so that a read racing a replace can start over from it.
                return load_distributed_checkpoint(path, weights_only=weights_only)
            raise CheckpointError(
                f"Checkpoint path {os.fspath(target)!r} is a folder but not a sharded checkpoint (it has no "
                "'.metadata' file written by `torch.distributed.checkpoint`).",
                path=os.fspath(target),
                reason="corrupt",
            )
        # Opened once: the format, the records and the mapping all come from this one file, even while a
        # save replaces the file at ``target`` (see `_load_mapped`).
        with open(target, "rb") as file:
            return read_open_file(target, file, map_location, weights_only, mmap)

    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete the checkpoint file or folder at ``path``; a missing path is not an error.

        Args:
            path: The file or folder to delete.
        """
        url = _remote(path)
        if url is not None:
            remove_remote(url)
            return
        target = _local_path(path, "remove_checkpoint")
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
