"""Replace a file all at once: readers see the old content or the new, never a half-written file.

The one implementation of atomic single-file writes; checkpoint I/O, loggers and strategy plugins that write
one file reuse it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

__all__ = ["atomic_write", "remove_stale_temps", "temp_path_for"]

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
    on the same host removes it.

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
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(target.parent)
