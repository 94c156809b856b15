"""Checkpoint folders that a commit marker, written last, makes complete: on a local disk or in object storage.

Run checkpoints (:class:`~fabric_core.run_checkpoints.RunCheckpoints`) keep one such folder per step. The
marker is a JSON file holding the step, the world size and a sha256 digest of every other file of the folder;
a folder without it is incomplete: never chosen, never counted as kept.

On a local disk the folder is filled under a hidden temp name and renamed into place (see the caller). An
object store has no folders to rename: the files are uploaded under the folder's own name and the marker is
uploaded after the last of them, in one request that readers see whole or not at all. Whatever a writer
killed before that leaves is a folder without a marker; deleting a folder deletes its marker first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from fabric_core.errors import CheckpointError
from fabric_core.io._remote import (
    list_files,
    read_remote,
    remove_remote,
    remove_remote_folder,
    sha256_remote,
    write_remote,
)
from fabric_core.io.atomic import atomic_write, temp_path_for
from fabric_core.io.locations import Location, join

__all__ = [
    "MARKER",
    "check_digests",
    "digests",
    "read_marker",
    "remove_folder",
    "set_aside",
    "step_folders",
    "write_marker",
]

#: The commit marker inside each checkpoint folder, written last.
MARKER: Final = "COMMITTED"
#: What a folder whose digests failed is given instead of its marker, in object storage (nothing is renamed there).
CORRUPT_MARKER: Final = "COMMITTED.corrupt"


def read_marker(folder: Location) -> dict[str, Any] | None:
    """The commit marker of a checkpoint folder, or ``None`` if it has none (or an unreadable one)."""
    try:
        where = join(folder, MARKER)
        text = where.read_bytes() if isinstance(where, Path) else read_remote(where).getvalue()
        marker = json.loads(text)
    except (OSError, ValueError, CheckpointError):
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("files"), dict) else None


def write_marker(folder: Location, marker: Mapping[str, Any]) -> None:
    """Write the commit marker into ``folder``, whole or not at all (the last write of a checkpoint)."""
    data = json.dumps(marker, indent=1, sort_keys=True).encode()
    where = join(folder, MARKER)
    if isinstance(where, Path):
        with atomic_write(where) as file:
            file.write(data)
    else:
        write_remote(where, data)


def _files(folder: Location) -> list[str]:
    if isinstance(folder, str):
        return [name for name in list_files(folder) if name not in (MARKER, CORRUPT_MARKER)]
    found = []
    for root, _, files in os.walk(folder):
        for name in files:
            relative = (Path(root) / name).relative_to(folder).as_posix()
            if relative != MARKER:
                found.append(relative)
    return sorted(found)


def _sha256(path: Location) -> str:
    if isinstance(path, str):
        return sha256_remote(path)
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def digests(folder: Location) -> list[tuple[str, str]]:
    """``(relative name, sha256)`` of every file under ``folder`` except the marker (an object store's are
    read back from it: the digests are of what the store holds)."""
    return [(name, _sha256(join(folder, name))) for name in _files(folder)]


def check_digests(folder: Location, marker: Mapping[str, Any] | None = None) -> None:
    """Check every file of a checkpoint folder against the digests in its marker.

    Raises:
        CheckpointError: A file is missing or its content differs from what was saved (``reason="corrupt"``),
            naming the file.
    """
    marker = read_marker(folder) if marker is None else marker
    if marker is None:
        raise CheckpointError(f"{os.fspath(folder)!r} has no commit marker.", path=os.fspath(folder), reason="corrupt")
    for name, expected in sorted(marker["files"].items()):
        path = join(folder, name)
        try:
            actual = _sha256(path)
        except OSError as err:
            raise CheckpointError(
                f"Checkpoint file {os.fspath(path)!r} cannot be read ({err}).", path=os.fspath(path), reason="corrupt"
            ) from err
        if actual != expected:
            raise CheckpointError(
                f"Checkpoint file {os.fspath(path)!r} is damaged: its sha256 is {actual}, but {expected} was saved.",
                path=os.fspath(path),
                reason="corrupt",
            )


def step_folders(directory: Location, pattern: re.Pattern[str]) -> dict[str, bool]:
    """The folders of ``directory`` whose names match ``pattern``, each with whether it holds a marker.

    In object storage this is one listing of every object under ``directory``; a marker that is listed is
    whole (a single upload).
    """
    if isinstance(directory, Path):
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {
            entry.name: os.path.isfile(os.path.join(entry.path, MARKER))
            for entry in entries
            if pattern.fullmatch(entry.name) is not None and entry.is_dir()
        }
    found: dict[str, bool] = {}
    for name in list_files(directory):
        head, _, rest = name.partition("/")
        if rest and pattern.fullmatch(head) is not None:
            found[head] = found.get(head, False) or rest == MARKER
    return found


def remove_folder(folder: Location) -> None:
    """Delete a checkpoint folder so that no moment shows it complete without all its files.

    A local folder is renamed to a hidden temp name first (a kill during the deletion leaves that, which a
    later save sweeps); in object storage the marker is deleted first.
    """
    if isinstance(folder, str):
        remove_remote_folder(folder, first=(MARKER,))
        return
    doomed = temp_path_for(folder)
    try:
        os.rename(folder, doomed)
    except OSError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def set_aside(folder: Location) -> str:
    """Take a damaged checkpoint out of the choice, keeping its files; returns what it is called now.

    A local folder is renamed ``<name>.corrupt``; in object storage (no renames) its marker becomes
    :data:`CORRUPT_MARKER`, which makes the folder incomplete.
    """
    if isinstance(folder, str):
        marker = join(folder, MARKER)
        assert isinstance(marker, str)
        try:
            write_remote(os.fspath(join(folder, CORRUPT_MARKER)), read_remote(marker).getvalue())
            remove_remote(marker)
        except (OSError, CheckpointError):
            return folder.rsplit("/", 1)[-1]
        return f"{folder.rsplit('/', 1)[-1]} (its marker renamed to {CORRUPT_MARKER})"
    aside = folder.with_name(folder.name + ".corrupt")
    if os.path.lexists(aside):
        aside = temp_path_for(folder, ".corrupt")
    try:
        os.rename(folder, aside)
    except OSError:
        return folder.name
    return aside.name
