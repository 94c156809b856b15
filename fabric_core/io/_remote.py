"""Files on any filesystem fsspec knows: local paths, ``memory://``, ``s3://``, ``gs://``, ... (torch-free).

:class:`~fabric_core.io.torch_io.TorchCheckpointIO` (what ``fabric.save``/``fabric.load`` use) sends a
URL whose protocol is not ``file`` here, so remote single-file checkpoints work wherever fsspec and the
protocol's package (``s3fs``, ``gcsfs``, ``adlfs``) are installed. Loads are safe by default
(``weights_only=True``) for remote files as for local ones.

A save is all-or-nothing where the filesystem allows: an object store (S3, GCS, Azure) receives the whole
file in one upload, which readers see complete or not at all; other filesystems get the bytes under a
temporary name in the same folder, then a ``mv`` onto the target (atomic where the filesystem's rename
is). If the upload fails, the temporary file is removed and the previous checkpoint stays.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import uuid
from typing import TYPE_CHECKING, Any, Final

from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.utilities.types import _PATH

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "get_filesystem",
    "is_remote_url",
    "list_files",
    "read_remote",
    "remove_remote",
    "remove_remote_folder",
    "sha256_remote",
    "write_remote",
]

log = logging.getLogger(__name__)

_URL: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# Protocols whose stores put an object in place in one request: a single upload is already atomic.
_OBJECT_STORES: Final = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2"})
_PACKAGES: Final = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


def _protocol(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return text.split("://", 1)[0].lower() if _URL.match(text) else "file"


def is_remote_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URL for a filesystem other than the local one (``file://`` is local)."""
    return _protocol(path) != "file"


def _is_local_file_protocol(path: _PATH) -> bool:
    return not is_remote_url(path)


def get_filesystem(path: _PATH, **kwargs: Any) -> AbstractFileSystem:
    """The fsspec filesystem that serves ``path`` (the local one for plain paths).

    Args:
        path: A local path or a URL such as ``"s3://bucket/run/last.ckpt"``.
        **kwargs: Options for the filesystem (credentials, endpoint, ...).

    Raises:
        InvalidConfigError: No fsspec, or the protocol is unknown or its package is not installed.
    """
    return _url_to_fs(path, **kwargs)[0]


def _url_to_fs(path: _PATH, **kwargs: Any) -> tuple[AbstractFileSystem, str]:
    text = os.fspath(path)
    try:
        from fsspec.core import url_to_fs
    except ImportError as err:  # pragma: no cover - torch depends on fsspec
        raise InvalidConfigError(
            f"{text!r} needs fsspec to be read or written: pip install fsspec", argument="path", value=text
        ) from err
    try:
        fs, stripped = url_to_fs(text, **kwargs)
    except (ImportError, ValueError) as err:
        protocol = _protocol(text)
        package = _PACKAGES.get(protocol)
        hint = f" Install its filesystem: pip install {package}" if package else ""
        raise InvalidConfigError(
            f"No filesystem for the protocol {protocol!r} of {text!r} ({err}).{hint}", argument="path", value=text
        ) from err
    return fs, stripped


def _is_object_storage(fs: AbstractFileSystem) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    return any(p in _OBJECT_STORES for p in protocols)


def _is_dir(fs: AbstractFileSystem, path: _PATH, strict: bool = False) -> bool:
    """Whether ``path`` is a folder; on an object store (no real folders), anything not a file is one
    unless ``strict``."""
    if _is_object_storage(fs) and not strict:
        return not fs.isfile(os.fspath(path))
    return bool(fs.isdir(os.fspath(path)))


def write_remote(url: str, data: bytes) -> None:
    """Put ``data`` at ``url`` all-or-nothing where the filesystem allows (see the module docstring)."""
    fs, target = _url_to_fs(url)
    if _is_object_storage(fs):
        fs.pipe_file(target, data)
        fs.invalidate_cache()
        if fs.isdir(target):
            # A sharded checkpoint saved at the same name before: gone once the file is in place (its
            # `.metadata` first), so that no reader takes the folder for the checkpoint at this name.
            remove_remote_folder(url, first=(".metadata",))
        return
    parent = fs._parent(target)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    temporary = f"{target}.tmp-{uuid.uuid4().hex}"
    try:
        fs.pipe_file(temporary, data)
        fs.mv(temporary, target)
    except BaseException:
        try:
            if fs.exists(temporary):
                fs.rm(temporary)
        except Exception:  # the write's error matters more than a failed clean-up
            log.debug("Could not remove the temporary file %s", temporary, exc_info=True)
        raise


def read_remote(url: str) -> io.BytesIO:
    """The bytes of the checkpoint file at ``url``.

    Raises:
        FileNotFoundError: Nothing is there.
        CheckpointError: ``url`` is a folder (the caller reads a sharded checkpoint folder as one).
    """
    fs, target = _url_to_fs(url)
    fs.invalidate_cache()  # written or deleted by another process since this one last looked, perhaps
    if fs.isdir(target) and not fs.isfile(target):
        raise CheckpointError(
            f"Checkpoint path {url!r} is a folder but not a sharded checkpoint (it has no '.metadata' file "
            "written by `torch.distributed.checkpoint`).",
            path=url,
            reason="corrupt",
        )
    try:
        with fs.open(target, "rb") as file:
            return io.BytesIO(file.read())
    except FileNotFoundError:
        raise FileNotFoundError(f"Checkpoint file not found: {url}") from None


def remove_remote(url: str) -> None:
    """Delete the file or folder at ``url``; a missing one is not an error."""
    fs, target = _url_to_fs(url)
    fs.invalidate_cache()
    if fs.exists(target):
        fs.rm(target, recursive=True)


def remove_remote_folder(url: str, first: tuple[str, ...] = ()) -> None:
    """Delete every object under the folder (prefix) ``url``, the files named in ``first`` before the others.

    An object store deletes many objects in one request in no set order: what makes the folder a complete
    checkpoint (its commit marker, DCP's ``.metadata``) is deleted on its own first, so that a process
    killed during the deletion leaves an incomplete folder, never one that looks complete but lacks files.
    """
    fs, target = _url_to_fs(url)
    root = target.rstrip("/")
    for name in first:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(f"{root}/{name}")
    fs.invalidate_cache()
    found = fs.find(root)
    if found:
        fs.rm(found)
    fs.invalidate_cache()


def list_files(url: str) -> list[str]:
    """The files under the folder (prefix) ``url``, as names relative to it joined with ``/``, sorted."""
    fs, target = _url_to_fs(url)
    fs.invalidate_cache()  # a listing of another process's writes: never an old one kept by this process
    root = target.rstrip("/") + "/"
    return sorted(path[len(root) :] for path in fs.find(root.rstrip("/")) if path.startswith(root))


def sha256_remote(url: str) -> str:
    """The sha256 digest of the object at ``url``, read in pieces (never whole in memory)."""
    fs, target = _url_to_fs(url)
    digest = hashlib.sha256()
    with fs.open(target, "rb") as file:
        for piece in iter(lambda: file.read(8 * 2**20), b""):
            digest.update(piece)
    return digest.hexdigest()
