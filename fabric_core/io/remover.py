"""A background thread that deletes replaced files, so that freeing a large file's blocks does not hold up a save.

:func:`~fabric_core.io.atomic.atomic_write` gives a large file it replaces a second name (:func:`_hold_replaced`)
and hands that name to the thread; :func:`wait_for_removals` (and interpreter exit) waits until the queue is
empty.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from pathlib import Path
from typing import Final

from fabric_core.io.temp_names import temp_path_for

__all__ = ["BACKGROUND_REMOVAL_BYTES", "wait_for_removals"]

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
