"""Where a checkpoint is: a local path or a URL (``s3://bucket/run``), each kept in its own form.

``Path("s3://bucket/run")`` is ``s3:/bucket/run``, a local folder named ``s3:``: every function that turns a
checkpoint location into a ``Path`` must first ask :func:`is_url`. Here a URL stays a ``str`` and is joined
with ``/``; a local path becomes a ``Path``. The object-store operations go through fsspec
(:mod:`fabric_core.io._remote`), so any protocol whose filesystem is installed works (``s3fs`` for ``s3://``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeAlias

from fabric_core.io._remote import _url_to_fs, is_remote_url
from fabric_core.utilities.types import PathLike

__all__ = ["Location", "exists", "is_dir", "is_url", "join", "location", "object_identity"]

#: A checkpoint location: a local ``Path``, or a URL as a ``str``.
Location: TypeAlias = Path | str


def is_url(path: PathLike) -> bool:
    """Whether ``path`` names a file or folder on another filesystem than the local one (``file://`` is local)."""
    return is_remote_url(path)


def location(path: PathLike) -> Location:
    """``path`` as a ``Path`` if it is local, else the URL as a ``str`` (never ``Path("s3://...")``)."""
    text = os.fspath(path)
    if is_remote_url(text):
        return text
    return Path(text[len("file://") :]) if text.lower().startswith("file://") else Path(text)


def join(folder: PathLike, *names: str) -> Location:
    """``folder / name / ...``: with ``/`` for a URL (whatever the local separator), as ``Path`` otherwise."""
    where = location(folder)
    if isinstance(where, Path):
        return where.joinpath(*names)
    return "/".join([where.rstrip("/"), *names])


def exists(path: PathLike) -> bool:
    """Whether a file or folder is at ``path`` (on an object store: an object, or objects under the prefix)."""
    where = location(path)
    if isinstance(where, Path):
        return where.exists()
    fs, target = _url_to_fs(where)
    fs.invalidate_cache()  # another process may have written or deleted it since this one last looked
    return bool(fs.exists(target))


def is_dir(path: PathLike) -> bool:
    """Whether ``path`` is a folder (on an object store: a prefix that holds objects)."""
    where = location(path)
    if isinstance(where, Path):
        return where.is_dir()
    fs, target = _url_to_fs(where)
    fs.invalidate_cache()
    return bool(fs.isdir(target))


def object_identity(url: str) -> str | None:
    """What tells one upload of the object at ``url`` from another (its ETag, size and time), or ``None``.

    Every upload makes a new object: two reads that see the same identity saw the same upload.
    """
    fs, target = _url_to_fs(url)
    fs.invalidate_cache()
    try:
        info = fs.info(target)
    except FileNotFoundError:
        return None
    if info.get("type") == "directory":
        return None
    tag = info.get("ETag") or info.get("etag") or info.get("md5") or ""
    when = info.get("LastModified") or info.get("mtime") or info.get("created") or ""
    return f"{tag}:{info.get('size')}:{when}"
