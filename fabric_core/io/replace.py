"""Put a new folder or file at a path in one step (:func:`replace_path`), and refuse to replace a folder of other files.

On Linux the two names are swapped by ``renameat2(RENAME_EXCHANGE)``, called through ctypes; elsewhere the
previous path is renamed to its ``.old`` name first (see :mod:`fabric_core.io.temp_names`).
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import os
import sys
from pathlib import Path
from typing import Any, Final

from fabric_core.io._remote import is_remote_url, list_files
from fabric_core.io.temp_names import OLD_SUFFIX, _remove, temp_path_for
from fabric_core.utilities.types import PathLike

__all__ = ["folder_in_the_way", "refuse_folder_in_the_way", "replace_path"]

_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2


def _load_renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28+, musl 1.2.3+
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2: Any = _load_renameat2()


def _exchange(first: Path, second: Path) -> bool:
    """Swap the names ``first`` and ``second`` in one step; ``False`` where this system cannot."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False  # an old kernel, or a filesystem without RENAME_EXCHANGE (some network and FUSE mounts)
    raise OSError(code, f"cannot swap {os.fspath(first)!r} and {os.fspath(second)!r}: {os.strerror(code)}")


#: What marks a folder as a checkpoint, which a save to its path replaces whole (an empty folder may be replaced
#: too): torch.distributed.checkpoint's ``.metadata`` and shards, fabric-core's ``meta.pt``, DeepSpeed's ``latest``
#: and tag folder, torch_xla's shard files, and a run checkpoint's ``COMMITTED`` marker.
_CHECKPOINT_ENTRIES: Final = (".metadata", "meta.pt", "latest", "checkpoint", "zero_to_fp32.py", "COMMITTED")
_CHECKPOINT_PATTERNS: Final = ("*.distcp", "checkpoint_rank-*.pth")


def folder_in_the_way(target: PathLike) -> str | None:
    """Why a checkpoint must not replace what is at ``target``: a folder holding something other than a checkpoint.

    ``target`` may be a URL of object storage: its folder is the objects under ``target/``.

    Returns:
        ``None`` where ``target`` is missing, a file, an empty folder or a checkpoint folder; else a sentence
        naming the folder and some of what it holds.
    """
    if is_remote_url(target):
        names = sorted({name.split("/", 1)[0] for name in list_files(os.fspath(target))})
    else:
        path = Path(target)
        if path.is_symlink() or not path.is_dir():
            return None
        names = sorted(os.listdir(path))
    if not names or any(name in _CHECKPOINT_ENTRIES for name in names):
        return None
    if any(fnmatch.fnmatch(name, pattern) for name in names for pattern in _CHECKPOINT_PATTERNS):
        return None
    shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"{os.fspath(target)!r} is a folder that holds other files ({shown}), not a checkpoint; saving a "
        "checkpoint there would replace the folder and delete them. Save to another path, or move the folder away."
    )


def refuse_folder_in_the_way(target: PathLike) -> None:
    """Raise where a checkpoint saved at ``target`` would delete a folder of other files.

    Raises:
        FolderInTheWayError: ``target`` is a folder holding something other than a checkpoint.
    """
    why = folder_in_the_way(target)
    if why is not None:
        from fabric_core.errors import FolderInTheWayError

        raise FolderInTheWayError(why, argument="path", value=os.fspath(target))


def replace_path(new: PathLike, target: PathLike) -> None:
    """Put ``new`` (a folder or a file) at ``target`` in one step, replacing a folder or file there.

    On Linux the two names are swapped atomically (``renameat2(RENAME_EXCHANGE)``): ``target`` holds the
    previous checkpoint, then the new one, never nothing. The previous one, now under ``new``'s temp name,
    is then deleted; a kill during that deletion leaves a temp that the next save of ``target`` removes
    (see :func:`remove_stale_temps`). Where swapping is not possible (other systems, filesystems without
    it), the previous path is first renamed to an ``.old`` name next to it; a reader that finds ``target``
    missing at that moment reads the ``.old`` one (:func:`committed_path`), and a writer killed there
    leaves it for the next save to rename back.

    Args:
        new: The complete new folder or file, in the same folder as ``target`` (use :func:`temp_path_for`).
        target: The path to replace; it need not exist.

    Raises:
        FolderInTheWayError: ``target`` is a folder of other files (:func:`folder_in_the_way`); nothing changes.
    """
    new, target = Path(new), Path(target)
    refuse_folder_in_the_way(target)  # the last line of defence: callers check before writing
    if os.path.lexists(target) and _exchange(new, target):
        _fsync_directory(target.parent)
        _remove(os.fspath(new))
        return
    if not os.path.lexists(target):
        try:
            os.rename(new, target)  # a missing target: one rename is atomic
            _fsync_directory(target.parent)
            return
        except OSError as err:
            if not os.path.lexists(target):
                raise
            del err  # another writer put something there meanwhile: replace it below
    old = temp_path_for(target, OLD_SUFFIX)
    os.rename(target, old)
    os.rename(new, target)
    _fsync_directory(target.parent)
    _remove(os.fspath(old))


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
