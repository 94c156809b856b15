"""Replace a file all at once: readers see the old content or the new, never a half-written file.

The one implementation of atomic single-file writes; checkpoint I/O, loggers and strategy plugins that write
one file reuse it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import re
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

__all__ = ["atomic_write", "remove_stale_temps", "temp_path_for", "wait_for_removals"]

PathLike = str | os.PathLike[str]

TEMP_SUFFIX: Final = ".tmp"
# Keeps the temp file's name under the 255-byte limit of common filesystems whatever the target's name.
_MAX_NAME_IN_TEMP: Final = 100


def _host_tag() -> str:
    # "-" separates the fields of a temp name, so it must not appear inside the host field.
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _temp_prefix(target: Path) -> str:
    return f".{target.name[:_MAX_NAME_IN_TEMP]}."


def temp_path_for(target: PathLike) -> Path:
    """Return a fresh temp path next to ``target``: ``.<name>.<host>-<pid>-<random>.tmp``.

    The leading dot hides it from ``ls`` and from globs such as ``*.ckpt``; host and pid let a later save
    tell a temp left by a killed writer from one a live writer is still filling.
    """
    target = Path(target)
    field = f"{_host_tag()}-{os.getpid()}-{secrets.token_hex(6)}"
    return target.parent / f"{_temp_prefix(target)}{field}{TEMP_SUFFIX}"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":
        # On Windows `os.kill(pid, 0)` would send CTRL_C_EVENT, not probe: never guess there.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(target: PathLike) -> list[Path]:
    """Delete temp files that writers of ``target`` on this host left when they were killed.

    Only temps whose writer process no longer exists are removed, so a concurrent writer is never disturbed;
    temps from other hosts (shared filesystems) are left alone.

    Args:
        target: The file whose leftover temps to remove.

    Returns:
        The paths removed.
    """
    target = Path(target)
    prefix, host = _temp_prefix(target), _host_tag()
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(prefix) and name.endswith(TEMP_SUFFIX)):
            continue
        fields = name[len(prefix) : -len(TEMP_SUFFIX)].split("-")
        if len(fields) != 3 or fields[0] != host or not fields[1].isdigit():
            continue
        if _pid_alive(int(fields[1])):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


#: Replaced files at least this large are released by a background thread (see :func:`atomic_write`).
BACKGROUND_REMOVAL_BYTES: Final = 64 * 2**20


class _Remover:
    """One daemon thread that unlinks files queued to it; started on first use, drained at exit."""

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            # A forked child has none of the parent's threads: its copy of the queue (perhaps with pending
            # files, perhaps with a lock held mid-operation) must not be waited on at its exit.
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, path: Path) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="fabric-core-remover", daemon=True)
                self._thread.start()
                atexit.register(self.wait)
        self._queue.put(os.fspath(path))

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            try:
                os.unlink(path)
            except OSError:
                pass  # gone already, or not ours to remove: a later save's stale-temp sweep retries
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        if self._thread is not None:
            self._queue.join()


_remover: Final = _Remover()


def wait_for_removals() -> None:
    """Block until the files :func:`atomic_write` replaced have been deleted in the background."""
    _remover.wait()


def _hold_replaced(target: Path) -> Path | None:
    """Give a large file about to be replaced a second name, so that replacing it does not free it.

    Freeing a file's blocks costs about a second per GB on some filesystems (ext4 with discard, network
    volumes), and ``os.replace`` would do it in the caller's thread. With a second link the rename only
    drops a name; the background thread deletes the last one. The name is a temp name of this process,
    so if the process dies first, the next write of ``target`` on this host removes it.
    """
    try:
        if os.lstat(target).st_size < BACKGROUND_REMOVAL_BYTES:
            return None
        held = temp_path_for(target)
        os.link(target, held, follow_symlinks=False)
    except (OSError, NotImplementedError):  # no such file, or no hard links here (FAT, some network mounts)
        return None
    return held


def _fsync_directory(directory: Path) -> None:
    if os.name == "nt":  # Windows cannot open a directory for fsync; NTFS journals the rename itself.
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        # Some network and FUSE filesystems reject fsync on a directory; the file itself is already durable.
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: PathLike) -> Iterator[BinaryIO]:
    """Write a file through a temp file in the same folder, then rename it onto ``path``.

    The parent folder is created. The temp file is flushed and fsynced before ``os.replace`` puts it in
    place, and the folder is fsynced after, so a crash at any point leaves either the previous file or the
    complete new one. If the block raises, the temp file is deleted and ``path`` is untouched. A writer
    killed outright (SIGKILL, power loss) can leave its temp file behind; the next write to the same path
    on the same host removes it. A replaced file of :data:`BACKGROUND_REMOVAL_BYTES` or more is deleted by
    a background thread (:func:`wait_for_removals` waits for it; so does interpreter exit).

    Example::

        with atomic_write("out/model.pt") as f:
            torch.save(state, f)

    Args:
        path: The file to create or replace.

    Yields:
        The temp file, opened for binary writing.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(target)
    tmp = temp_path_for(target)
    # Mode 0o666 lets the umask decide the permissions, as for any new file (mkstemp would force 0o600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        held = _hold_replaced(target)
        try:
            os.replace(tmp, target)
        except BaseException:
            if held is not None:
                with contextlib.suppress(OSError):
                    os.unlink(held)  # the target still has its own name: only the extra one goes
            raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(target.parent)
    if held is not None:
        _remover.submit(held)
