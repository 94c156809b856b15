"""Reading a checkpoint folder as one checkpoint while another process may replace it.

:func:`~fabric_core.io.atomic.replace_path` swaps a new folder in and then deletes the previous one. A
reader that opened ``.metadata``, the shard files and ``meta.pt`` each by path could take some from one
checkpoint and some from the next, or find a file deleted under it. Here the folder is opened once, as a
directory descriptor, and every file is read through it (on Linux ``/proc/self/fd/<fd>/<name>``, which
names that very folder whatever is renamed onto its path): one load, one folder. If the folder is then
deleted before all its files were opened, the read fails and is tried again from the path; after
:data:`ATTEMPTS` replaced folders in a row it gives up with a :class:`CheckpointError`, never a mix.

Without a descriptor folder (macOS, Windows) files are read by path, and a read is kept only if the
folder at the path is the opened one afterwards: an open descriptor keeps the folder's inode from being
reused, and a replaced folder never comes back, so every file read in between came from it.

A folder in object storage (``s3://bucket/ckpt``, :class:`RemoteFolder`) is read by its URL, and a read is
kept only if its ``.metadata`` is the same upload afterwards: a sharded save there deletes the previous
``.metadata`` before it writes or deletes any other file, and writes its own last, so every file read while
one ``.metadata`` stayed in place belongs to that checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, TypeVar

from fabric_core.errors import CheckpointError
from fabric_core.io.atomic import committed_path, existing_committed_path
from fabric_core.io.locations import exists, is_dir, is_url, join, object_identity

__all__ = ["ATTEMPTS", "Folder", "OpenFolder", "RemoteFolder", "open_folder", "read_one_folder"]

_T = TypeVar("_T")
#: Where Linux names each open descriptor; a folder's descriptor there opens files inside that folder.
_FD_FOLDER: Final = Path("/proc/self/fd")
#: Reads of a folder that was replaced meanwhile before a load gives up.
ATTEMPTS: Final = 8


def _identity(status: os.stat_result) -> tuple[int, int, int]:
    return status.st_dev, status.st_ino, status.st_mtime_ns


class OpenFolder:
    """The checkpoint folder at ``path`` (or its committed ``.old`` name), opened once.

    Attributes:
        path: The folder's name, for messages.
        root: Where to read its files: a name for the opened folder itself where the system has one,
            else ``path``.
        pinned: Whether ``root`` names the opened folder whatever happens to ``path``.

    Raises:
        FileNotFoundError: Nothing is at ``path``.
        NotADirectoryError: ``path`` is a file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.requested = Path(path)
        self._fd: int | None = None
        self._seen: tuple[int, int, int] | None = None
        for _ in range(ATTEMPTS):
            self.path = committed_path(self.requested)
            try:
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                break
            except FileNotFoundError:
                # The `.old` name found a moment ago was renamed back or removed by its writer: look again.
                if existing_committed_path(self.requested) is None:
                    raise FileNotFoundError(f"Checkpoint folder not found: {os.fspath(path)}") from None
            except NotADirectoryError:
                raise
            except OSError:
                # A system that cannot open folders (Windows): read by path, and compare the folder's
                # identity before and after the read instead.
                self._seen = _identity(os.stat(self.path))
                break
        else:
            raise FileNotFoundError(f"Checkpoint folder kept vanishing while being opened: {os.fspath(path)}")
        alias = _FD_FOLDER / str(self._fd)
        self.pinned = self._fd is not None and alias.is_dir()
        self.root = alias if self.pinned else self.path
        if self._fd is None and not self.path.is_dir():
            raise NotADirectoryError(f"Checkpoint path is not a folder: {os.fspath(self.path)}")

    def replaced(self) -> bool:
        """Whether the folder at the requested path is no longer the one opened (replaced or deleted)."""
        try:
            now = os.stat(committed_path(self.requested))
            if self._fd is None:
                return self._seen != _identity(now)
            held = os.fstat(self._fd)
        except OSError:
            return True
        return held.st_nlink == 0 or (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino)

    def shown(self, path: str | os.PathLike[str]) -> Path:
        """``path`` (a file under :attr:`root`) with the folder's name instead of the descriptor's, for messages."""
        text = os.fspath(path)
        root = os.fspath(self.root)
        inside = text == root or text.startswith(root + os.sep)
        return self.path / os.path.relpath(text, root) if inside else Path(text)

    def close(self) -> None:
        """Release the folder."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> OpenFolder:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


class RemoteFolder:
    """The checkpoint folder at the URL ``url`` (object storage), read as one checkpoint (see the module).

    Has :class:`OpenFolder`'s attributes, with ``path`` and ``root`` the URL (a ``str``) and ``pinned``
    ``False``: :meth:`replaced` tells whether the ``.metadata`` read is still the one in place.

    Raises:
        FileNotFoundError: Nothing is at ``url``.
        NotADirectoryError: ``url`` is one object, not a folder.
    """

    pinned = False

    def __init__(self, url: str) -> None:
        self.requested = url
        self.path = url.rstrip("/")
        self.root = self.path
        if not exists(url):
            raise FileNotFoundError(f"Checkpoint folder not found: {url}")
        if not is_dir(url):
            raise NotADirectoryError(f"Checkpoint path is not a folder: {url}")
        self._seen = object_identity(self._metadata())

    def _metadata(self) -> str:
        return os.fspath(join(self.path, ".metadata"))

    def replaced(self) -> bool:
        """Whether the folder's ``.metadata`` is no longer the upload seen when it was opened."""
        try:
            return object_identity(self._metadata()) != self._seen
        except OSError:
            return True

    def shown(self, path: str | os.PathLike[str]) -> str:
        """``path`` as it is: a URL names the folder already."""
        return os.fspath(path)

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> RemoteFolder:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


#: A checkpoint folder opened for one read: on a local disk, or in object storage.
Folder = OpenFolder | RemoteFolder


def open_folder(path: str | os.PathLike[str]) -> Folder:
    """The folder at ``path`` opened for one read: a :class:`RemoteFolder` for a URL, else an :class:`OpenFolder`."""
    return RemoteFolder(os.fspath(path)) if is_url(path) else OpenFolder(path)


def vanished(err: BaseException) -> bool:
    """Whether ``err`` can mean a file of the folder was deleted under the read (not a refused payload)."""
    if isinstance(err, CheckpointError):
        return err.reason == "corrupt"
    return isinstance(err, OSError)


def gave_up(path: str | os.PathLike[str], attempts: int) -> CheckpointError:
    """The error of a load whose folder was replaced under each of its ``attempts`` reads."""
    return CheckpointError(
        f"Sharded checkpoint folder {os.fspath(path)!r} was replaced by another process during each of {attempts} "
        "attempts to read it; nothing was loaded. Load it when it is saved less often, or load a copy.",
        path=os.fspath(path),
        reason="corrupt",
    )


def read_one_folder(path: str | os.PathLike[str], read: Callable[[Folder], _T], attempts: int = ATTEMPTS) -> _T:
    """Run ``read`` on the folder at ``path`` opened once; again on the new folder if it was replaced under it.

    ``read`` must take every file from :attr:`OpenFolder.root`. A failure that can mean a deleted file (a
    ``"corrupt"`` :class:`CheckpointError` or an ``OSError``) is retried only if the folder was replaced
    meanwhile; otherwise it is raised as it is.

    Raises:
        FileNotFoundError: Nothing at ``path``.
        CheckpointError: The folder was replaced during each of ``attempts`` reads.
    """
    for attempt in range(attempts):
        with open_folder(path) as folder:
            try:
                result = read(folder)
            except (CheckpointError, OSError) as err:
                if not (vanished(err) and folder.replaced()):
                    raise
                if attempt + 1 == attempts:
                    raise gave_up(path, attempts) from err
                continue
            if folder.pinned or not folder.replaced():
                return result
    raise gave_up(path, attempts)
