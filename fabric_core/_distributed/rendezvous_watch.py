"""While the processes of a job meet: a rank that fails takes every rank of every node down within seconds.

Without this, a rank that fails while the process group is being created (a refused connection, a bad
interface, a kill) ends only its own node: its agent stops its siblings, but the ranks of the other nodes wait
for it in the store or in gloo's connect until the rendezvous timeout (and gloo's own waits can be longer).

Under an elastic agent (``fabric-core run``, torchrun) the job's store exists before the workers start. Each
rank then, from just before ``init_process_group`` until it returns:

- registers under the attempt's prefix (who it is: rank, node, host, pid), then adds to a heartbeat counter
  every :data:`BEAT_SECONDS`;
- looks for the attempt's failure record at the same pace, and for registered ranks whose counter has not
  moved for :data:`STALE_SECONDS` (their process or their node died);
- on either, prints who failed and why, records it for the others, and exits at once (status 1): the main
  thread is inside torch's C++ code and cannot be interrupted otherwise.

A rank that raises while meeting records its own cause (:meth:`Meeting.fail`). A rank that never arrives is
not detected here: the rendezvous timeout bounds that wait, and its error names the ranks that never came.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from datetime import timedelta
from types import TracebackType
from typing import Any, Final

__all__ = ["BEAT_SECONDS", "STALE_SECONDS", "Meeting", "describe_rank"]

#: How often each rank beats and looks for a failure.
BEAT_SECONDS: Final = 0.5
#: A registered rank whose heartbeat has not moved for this long is taken for dead.
STALE_SECONDS: Final = 15.0
_CONNECT_TIMEOUT: Final = timedelta(seconds=10)


def describe_rank(rank: int, world_size: int, environ: Any = None) -> str:
    """``rank R of W (node N, host H, pid P)`` for this process."""
    environ = os.environ if environ is None else environ
    node = environ.get("GROUP_RANK", environ.get("NODE_RANK", "?"))
    return f"rank {rank} of {world_size} (node {node}, host {socket.gethostname()}, pid {os.getpid()})"


class Meeting:
    """The watch over one attempt's meeting, for this rank: a context manager around ``init_process_group``.

    Args:
        address: The store's host (``MASTER_ADDR``).
        port: The store's port (``MASTER_PORT``).
        rank: This process's global rank.
        world_size: The number of processes.
        prefix: The attempt's key prefix in the store.
    """

    def __init__(self, address: str, port: int, rank: int, world_size: int, prefix: str) -> None:
        self.rank = rank
        self.world_size = world_size
        self.me = describe_rank(rank, world_size)
        self._address, self._port = address, port
        self._prefix = prefix.rstrip("/") + "/meeting"
        self._store: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _key(self, *parts: object) -> str:
        return "/".join([self._prefix, *(str(part) for part in parts)])

    def __enter__(self) -> Meeting:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]  # not in torch's __all__

        try:
            self._store = TCPStore(self._address, self._port, is_master=False, timeout=_CONNECT_TIMEOUT)
            self._store.set(self._key("who", self.rank), self.me)
        except Exception:  # the meeting itself will report an unreachable store
            self._store = None
            return self
        self._thread = threading.Thread(target=self._watch, name="fabric-core-meeting", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._store is not None and kind is None:
            with contextlib.suppress(Exception):
                self._store.set(self._key("done", self.rank), "1")

    def fail(self, cause: str) -> None:
        """Record that this rank failed while meeting, so that every other rank stops at once."""
        if self._store is None:
            return
        with contextlib.suppress(Exception):
            self._store.compare_set(self._key("failed"), "", f"{self.me} failed while the processes met: {cause}")

    def missing(self) -> list[int]:
        """The ranks that never registered (never started, or could not reach the store)."""
        if self._store is None:
            return []
        try:
            return [r for r in range(self.world_size) if not self._store.check([self._key("who", r)])]
        except Exception:
            return []

    def _watch(self) -> None:
        store = self._store
        beats: dict[int, tuple[int, float]] = {}
        try:
            while not self._stop.wait(BEAT_SECONDS):
                store.add(self._key("beat", self.rank), 1)
                if store.check([self._key("failed")]):
                    self._leave(store.get(self._key("failed")).decode(errors="replace"))
                now = time.monotonic()
                for other in range(self.world_size):
                    if other == self.rank or not store.check([self._key("who", other)]):
                        continue
                    if store.check([self._key("done", other)]):
                        continue
                    count = store.add(self._key("beat", other), 0)
                    last = beats.get(other)
                    if last is None or last[0] != count:
                        beats[other] = (count, now)
                    elif now - last[1] > STALE_SECONDS:
                        who = store.get(self._key("who", other)).decode(errors="replace")
                        cause = (
                            f"{who} stopped answering while the processes met (no heartbeat for {STALE_SECONDS:g} s: "
                            "its process or its node died)"
                        )
                        store.compare_set(self._key("failed"), "", cause)
                        self._leave(cause)
        except Exception:  # the store is gone (its agent stopped): the meeting fails on its own, with its cause
            return

    def _leave(self, cause: str) -> None:
        if self._stop.is_set():
            return
        sys.stderr.write(f"fabric-core: {self.me} stops: {cause}\n")
        sys.stderr.flush()
        os._exit(1)
