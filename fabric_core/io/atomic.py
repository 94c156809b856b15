"""Replace a file all at once: readers see the old content or the new, never a half-written file.

The one implementation of atomic writes: single files (:func:`atomic_write`) and whole folders
(:func:`replace_path`, for sharded checkpoints); checkpoint I/O, loggers and strategy plugins reuse it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fnmatch
import os
import queue
import re
import secrets
import shutil
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, Protocol, TypeVar

from fabric_core.io._remote import _url_to_fs, is_remote_url, list_files, remove_remote_folder
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

_T = TypeVar("_T")

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


class _Ranks(Protocol):
    """What :func:`write_folder_collectively` needs of a strategy (``local_rank``, ``node_rank``,
    ``num_nodes`` and ``num_processes`` are read where it has them: one node otherwise)."""

    @property
    def world_size(self) -> int: ...

    @property
    def global_rank(self) -> int: ...

    @property
    def is_global_zero(self) -> bool: ...

    def broadcast(self, obj: _T, src: int = 0) -> _T: ...

    def barrier(self, name: str | None = None) -> None: ...

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool: ...


def write_folder_collectively(ranks: _Ranks, target: PathLike, write: Callable[[Path], None], name: str) -> None:
    """Have every rank write its part of a checkpoint folder, then put the folder at ``target`` in one step.

    Call on every rank. ``write(temp)`` runs on every rank with a temp folder next to ``target``; after a
    barrier the folder is put in place (:func:`replace_path`), and what killed saves of ``target`` left is
    removed first (:func:`remove_stale_temps`). An interrupted save leaves the previous checkpoint at
    ``target`` (never a mix, never nothing); a failed one removes its temp folder.

    Who does the replace depends on where the folder lives. On one node, or on several that share the
    folder's filesystem (checked by :func:`~fabric_core.utilities.distributed.is_shared_filesystem`), rank 0
    alone does, once. Where each node has its own disk, each node has its own temp folder (named by its first
    process) and its first process replaces the node's copy of ``target``: every node ends with a complete
    folder of what its ranks wrote.

    Args:
        ranks: The strategy (ranks, ``broadcast``, ``barrier``, ``reduce_boolean_decision``).
        target: The checkpoint folder to create or replace.
        write: Writes this rank's files into the folder it is given.
        name: Names the barriers (e.g. the strategy's name), for hang reports.
    """
    from fabric_core.utilities.distributed import _layout, is_shared_filesystem

    if is_remote_url(target):
        # `write` would be handed a local temp folder named after the URL (`s3:/bucket/...`): refused before
        # anything is written, on every rank (all are given the same path).
        from fabric_core.errors import InvalidConfigError

        raise InvalidConfigError(
            f"{name} writes its checkpoint folder with local file operations and cannot write to "
            f"{os.fspath(target)!r}. Save to a local path (or a bucket mounted as a local folder), then copy the "
            "folder to the bucket.",
            argument="path",
            value=os.fspath(target),
        )
    target = Path(target)
    node, local, num_nodes = _layout(ranks)
    if num_nodes > 1:
        target.parent.mkdir(parents=True, exist_ok=True)  # on every node: it may have its own disk
        shared = is_shared_filesystem(ranks, target.parent)
    else:
        shared = True
    replacer = ranks.is_global_zero if shared else local == 0
    in_the_way = folder_in_the_way(target) if replacer else None
    if replacer and in_the_way is None:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(target)
    mine = (os.fspath(temp_path_for(target)) if in_the_way is None else "", in_the_way) if replacer else ("", None)
    if shared:
        temp_name, in_the_way = ranks.broadcast(mine, src=0)
    else:
        # Each node's first process names its node's temp folder (its host and pid, for the sweep of a later
        # save on that node); ranks are numbered node by node (node_rank * num_processes + local_rank).
        per_node = int(getattr(ranks, "num_processes", 0)) or ranks.world_size // num_nodes
        answers = [ranks.broadcast(mine, src=n * per_node) for n in range(num_nodes)]
        temp_name = answers[node][0]
        in_the_way = next((why for _, why in answers if why is not None), None)
    if in_the_way is not None:  # every rank raises, before anything is written
        from fabric_core.errors import FolderInTheWayError

        raise FolderInTheWayError(in_the_way, argument="path", value=os.fspath(target))
    temp = Path(temp_name)
    try:
        write(temp)
        ranks.barrier(f"{name}-save")
        if replacer:
            replace_path(temp, target)
    finally:
        if replacer and os.path.lexists(temp):
            _remove(os.fspath(temp))
    ranks.barrier(f"{name}-save-done")


def write_remote_folder_collectively(
    ranks: _Ranks, url: str, write: Callable[[str], None], name: str, complete: str = ".metadata"
) -> None:
    """Have every rank write its part of a checkpoint folder straight into object storage at ``url``.

    Call on every rank. An object store cannot rename a folder into place, so the folder is written under its
    own name, and ``write`` must write the file named ``complete`` (what makes the folder a checkpoint: DCP's
    ``.metadata``) last, once every rank's files are there. Before anything is written, rank 0 deletes the
    previous checkpoint at ``url``, ``complete`` first, so that no moment shows a checkpoint whose files come
    from two saves; a save killed part-way leaves a folder without ``complete``, which no load takes for a
    checkpoint (and the previous checkpoint of the same name is gone: keep several names, as run checkpoints
    do, to always have one). A folder of other files at ``url`` is refused as locally.

    Args:
        ranks: The strategy (ranks, ``broadcast``, ``barrier``).
        url: The checkpoint folder's URL.
        write: Writes this rank's files into the folder it is given (the URL).
        name: Names the barrier (e.g. the strategy's name), for hang reports.
        complete: The file written last, deleted first.

    Raises:
        FolderInTheWayError: ``url`` holds other files than a checkpoint's; nothing is written, on every rank.
    """
    in_the_way = None
    if ranks.is_global_zero:
        in_the_way = folder_in_the_way(url)
        if in_the_way is None:
            fs, key = _url_to_fs(url)
            if fs.isfile(key):
                fs.rm_file(key)  # a single-file checkpoint saved at the same name before
            remove_remote_folder(url, first=(complete,))
    in_the_way = ranks.broadcast(in_the_way, src=0)
    if in_the_way is not None:
        from fabric_core.errors import FolderInTheWayError

        raise FolderInTheWayError(in_the_way, argument="path", value=url)
    write(url)
    ranks.barrier(f"{name}-save-done")
