"""Replace a file all at once: readers see the old content or the new, never a half-written file.

The one implementation of atomic writes: single files (:func:`atomic_write`, here) and whole folders
(:func:`replace_path`, for sharded checkpoints); checkpoint I/O, loggers and strategy plugins reuse it. The
parts live by concern and are importable from here too: temp names, their sweep and the committed path
(:mod:`~fabric_core.io.temp_names`), replacing a path in one step (:mod:`~fabric_core.io.replace`), the
background removal of replaced files (:mod:`~fabric_core.io.remover`) and folders every rank writes a part of
(:mod:`~fabric_core.io.collective_folders`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

# The names of the modules below stay importable from here (``X as X`` re-exports them).
from fabric_core.io.collective_folders import _Ranks as _Ranks
from fabric_core.io.collective_folders import write_folder_collectively as write_folder_collectively
from fabric_core.io.collective_folders import write_remote_folder_collectively as write_remote_folder_collectively
from fabric_core.io.remover import BACKGROUND_REMOVAL_BYTES as BACKGROUND_REMOVAL_BYTES
from fabric_core.io.remover import _hold_replaced as _hold_replaced
from fabric_core.io.remover import _Remover as _Remover
from fabric_core.io.remover import _remover as _remover
from fabric_core.io.remover import wait_for_removals as wait_for_removals
from fabric_core.io.replace import _AT_FDCWD as _AT_FDCWD
from fabric_core.io.replace import _CHECKPOINT_ENTRIES as _CHECKPOINT_ENTRIES
from fabric_core.io.replace import _CHECKPOINT_PATTERNS as _CHECKPOINT_PATTERNS
from fabric_core.io.replace import _RENAME_EXCHANGE as _RENAME_EXCHANGE
from fabric_core.io.replace import _exchange as _exchange
from fabric_core.io.replace import _fsync_directory as _fsync_directory
from fabric_core.io.replace import _load_renameat2 as _load_renameat2
from fabric_core.io.replace import _renameat2 as _renameat2
from fabric_core.io.replace import folder_in_the_way as folder_in_the_way
from fabric_core.io.replace import refuse_folder_in_the_way, replace_path
from fabric_core.io.temp_names import _MAX_NAME_IN_TEMP as _MAX_NAME_IN_TEMP
from fabric_core.io.temp_names import OLD_SUFFIX as OLD_SUFFIX
from fabric_core.io.temp_names import TEMP_SUFFIX as TEMP_SUFFIX
from fabric_core.io.temp_names import _changed as _changed
from fabric_core.io.temp_names import _host_tag as _host_tag
from fabric_core.io.temp_names import _leftovers as _leftovers
from fabric_core.io.temp_names import _pid_alive as _pid_alive
from fabric_core.io.temp_names import _remove as _remove
from fabric_core.io.temp_names import _temp_prefix as _temp_prefix
from fabric_core.io.temp_names import committed_path as committed_path
from fabric_core.io.temp_names import existing_committed_path as existing_committed_path
from fabric_core.io.temp_names import remove_stale_temps, temp_path_for
from fabric_core.utilities.types import PathLike

__all__ = [
    "atomic_write",
    "committed_path",
    "existing_committed_path",
    "folder_in_the_way",
    "refuse_folder_in_the_way",
    "remove_stale_temps",
    "replace_path",
    "temp_path_for",
    "wait_for_removals",
    "write_folder_collectively",
    "write_remote_folder_collectively",
]


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
    refuse_folder_in_the_way(target)
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
        if target.is_dir() and not target.is_symlink():
            replace_path(tmp, target)  # a file saved where a sharded checkpoint folder was
            return
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
