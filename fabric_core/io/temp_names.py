"""Temporary names next to a path, the sweep of those killed writers left, and where the committed path is.

A writer puts a new file or folder under a temp name (:func:`temp_path_for`) and renames it into place; these
names carry the writer's host and pid, so that a later save removes only what dead writers left
(:func:`remove_stale_temps`), and a reader finds a checkpoint that is, for a moment, under its ``.old`` name
(:func:`committed_path`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
from pathlib import Path
from typing import Final

from fabric_core.utilities.types import PathLike

__all__ = ["committed_path", "existing_committed_path", "remove_stale_temps", "temp_path_for"]

TEMP_SUFFIX: Final = ".tmp"
#: The name a replaced path has for a moment where the filesystem cannot swap two names in one step.
OLD_SUFFIX: Final = ".old"
# Keeps the temp file's name under the 255-byte limit of common filesystems whatever the target's name.
_MAX_NAME_IN_TEMP: Final = 100


def _host_tag() -> str:
    # "-" separates the fields of a temp name, so it must not appear inside the host field.
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _temp_prefix(target: Path) -> str:
    return f".{target.name[:_MAX_NAME_IN_TEMP]}."


def temp_path_for(target: PathLike, suffix: str = TEMP_SUFFIX) -> Path:
    """Return a fresh temp path next to ``target``: ``.<name>.<host>-<pid>-<random>.tmp``.

    The leading dot hides it from ``ls`` and from globs such as ``*.ckpt``; host and pid let a later save
    tell a temp left by a killed writer from one a live writer is still filling. The same name serves for
    a temp file and for a temp folder (a sharded checkpoint being written).
    """
    target = Path(target)
    field = f"{_host_tag()}-{os.getpid()}-{secrets.token_hex(6)}"
    return target.parent / f"{_temp_prefix(target)}{field}{suffix}"


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


def _leftovers(target: Path) -> list[tuple[os.DirEntry[str], str, str, int]]:
    """The temp and old names of ``target`` in its folder, as (entry, suffix, host, pid)."""
    prefix = _temp_prefix(target)
    found: list[tuple[os.DirEntry[str], str, str, int]] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return found
    for entry in entries:
        name = entry.name
        suffix = next((s for s in (TEMP_SUFFIX, OLD_SUFFIX) if name.endswith(s)), None)
        if suffix is None or not name.startswith(prefix):
            continue
        # The name is split from the right: "<target name>.<host>-<pid>-<random>"; a different target whose
        # name starts with this one's (``a`` and ``a.b``) leaves extra text in the host field, never a match.
        fields = name[len(prefix) : -len(suffix)].split("-")
        if len(fields) != 3 or not fields[1].isdigit() or re.fullmatch(r"[0-9a-f]{12}", fields[2]) is None:
            continue
        found.append((entry, suffix, fields[0], int(fields[1])))
    return found


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def remove_stale_temps(target: PathLike) -> list[Path]:
    """Clean up what writers of ``target`` on this host left when they were killed.

    Temp files and temp folders (``.tmp``) and replaced paths (``.old``) whose writer process no longer
    exists are removed, so a concurrent writer is never disturbed; names from other hosts (shared
    filesystems) are left alone, as are those of other paths. One exception: if ``target`` itself is
    missing because its writer was killed between the two renames of :func:`replace_path`'s fallback, the
    newest such ``.old`` is the committed checkpoint and is renamed back to ``target`` instead.

    Args:
        target: The path whose leftovers to remove.

    Returns:
        The paths removed.
    """
    target = Path(target)
    host = _host_tag()
    stale = [(e, suffix) for e, suffix, owner, pid in _leftovers(target) if owner == host and not _pid_alive(pid)]
    olds = sorted((e for e, suffix in stale if suffix == OLD_SUFFIX), key=_changed, reverse=True)
    if olds and not os.path.lexists(target):
        with contextlib.suppress(OSError):
            os.rename(olds[0].path, target)
    removed: list[Path] = []
    for entry, _ in stale:
        if os.path.lexists(entry.path):
            _remove(entry.path)
            removed.append(Path(entry.path))
    return removed


def _changed(entry: os.DirEntry[str]) -> int:
    # A rename updates the renamed inode's change time: the newest ``.old`` was the latest committed one.
    try:
        return entry.stat(follow_symlinks=False).st_ctime_ns
    except OSError:
        return -1


def committed_path(target: PathLike) -> Path:
    """Where the committed checkpoint of ``target`` is: ``target``, or, for a moment, its ``.old`` name.

    Where :func:`replace_path` cannot swap two names in one step, it renames the previous checkpoint to an
    ``.old`` name and then the new one onto ``target``; between the two (or after a kill there, until the
    next save puts it back) ``target`` is missing, and a reader finds the previous checkpoint here.

    Args:
        target: The checkpoint path to read.

    Returns:
        ``target`` if it exists or if no ``.old`` name of it does; else the newest ``.old`` name.
    """
    target = Path(target)
    if os.path.lexists(target):
        return target
    olds = sorted((e for e, suffix, _, _ in _leftovers(target) if suffix == OLD_SUFFIX), key=_changed, reverse=True)
    return Path(olds[0].path) if olds else target


def existing_committed_path(target: PathLike) -> Path | None:
    """:func:`committed_path` if something is there now, else ``None`` (nothing at ``target`` at all).

    Looks twice: an ``.old`` name found a moment ago may have been removed since, but only after the new
    checkpoint was put at ``target``, which the second look finds.
    """
    for _ in range(2):
        found = committed_path(target)
        if found.exists():
            return found
    return None
