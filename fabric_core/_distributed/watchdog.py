"""A collective that waits too long explains itself: where every rank is, and the call at which they parted.

One daemon thread per process samples the stacks of the other threads a few times per threshold
(``sys._current_frames``). A thread blocked in a ``torch.distributed`` collective shows that collective's
Python frame on top of its stack; when the same frame is still there after ``FABRIC_CORE_HANG_WARN_SECONDS``,
the rank prints the collective, the fabric-core call that issued it and the user's file and line, then asks
every rank for its position through the job's key-value store. Each rank's thread answers within one
sampling interval with where its main thread is and its flight records (:mod:`.flight_recorder`), and the waiting
rank prints one table of every rank with the first call at which the ranks differ and, where it is known,
the cause. A rank that does not answer (dead, or stuck in C code that holds the GIL) is named as such.

With ``FABRIC_CORE_HANG_ABORT_SECONDS`` set, a collective that waits that long stops the job: the rank
prints the report as its error, leaves it in the store for the others, and exits; every other rank's thread
sees it within one interval, prints it and exits too, instead of waiting for the collective timeout.

The collectives themselves do nothing for this, so the hot path (``all_reduce`` of a tensor) costs what it
did; the thread's cost is one store round trip per interval (5 s at the default threshold).

The thread lives as long as what it watches: it starts only once a process group exists, ends within one
interval once that group is destroyed, and at once on :func:`stop` (the strategy's teardown) or on its own
``stop()`` (what test suites that look for leftover threads call on a daemon thread, Lightning's among them).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from datetime import timedelta
from types import FrameType
from typing import Any, Final

import torch.distributed as dist

from fabric_core._distributed import exit_handshake, flight_recorder
from fabric_core.environments._env import read_seconds

__all__ = [
    "ABORT_EXIT_CODE",
    "HANG_ABORT_VARIABLE",
    "HANG_WARN_VARIABLE",
    "hang_abort_seconds",
    "hang_warn_seconds",
    "start",
    "stop",
]

#: Seconds a collective may wait before every waiting rank prints where every rank is; ``0`` turns this off.
HANG_WARN_VARIABLE: Final = "FABRIC_CORE_HANG_WARN_SECONDS"
#: Seconds a collective may wait before the job stops on every rank with the report as its error (unset: never).
HANG_ABORT_VARIABLE: Final = "FABRIC_CORE_HANG_ABORT_SECONDS"
#: The exit code of a rank stopped by :data:`HANG_ABORT_VARIABLE`.
ABORT_EXIT_CODE: Final = 3
_DEFAULT_SECONDS: Final = 60.0
_C10D: Final = "torch.distributed.distributed_c10d"
#: The code of the exit handler's meeting of the ranks (through the store, so no torch.distributed frame shows).
_EXIT_MEETING: Final = exit_handshake._store_barrier.__code__
#: Up to this many ranks, every waiting rank prints the table; in larger jobs only the rank that asked first.
_TABLES_UP_TO: Final = 16
#: How many of each rank's last calls the report shows.
_SHOWN: Final = 4

_lock: Final = threading.Lock()
_thread: _WatchdogThread | None = None


def hang_warn_seconds() -> float:
    """The threshold from :data:`HANG_WARN_VARIABLE` (default 60 s; ``0`` turns the reports off).

    Raises:
        InvalidConfigError: The variable is not a number of seconds >= 0.
    """
    meaning = "0 turns the reports of waiting collectives off"
    return read_seconds(HANG_WARN_VARIABLE, _DEFAULT_SECONDS, meaning, zero_allowed=True)


def hang_abort_seconds() -> float:
    """The limit from :data:`HANG_ABORT_VARIABLE` (unset or ``0``: a waiting collective never stops the job).

    Raises:
        InvalidConfigError: The variable is not a number of seconds >= 0.
    """
    meaning = "a collective that waits this long stops the job on every rank; unset or 0 never"
    return read_seconds(HANG_ABORT_VARIABLE, 0.0, meaning, zero_allowed=True)


def start(rank: int, world_size: int) -> None:
    """Start this process's watchdog thread (one per process; a forked child starts its own). Nothing starts
    without a process group (as when a test mocks ``init_process_group``).

    Raises:
        InvalidConfigError: :data:`HANG_WARN_VARIABLE` or :data:`HANG_ABORT_VARIABLE` is malformed.
    """
    global _thread
    warn, abort = hang_warn_seconds(), hang_abort_seconds()
    if (warn == 0 and abort == 0) or not dist.is_initialized():
        return
    with _lock:
        running = _thread
        if running is not None and running.pid == os.getpid() and running.is_alive() and not running.stopping:
            return
        watch = _Watch(rank, world_size, warn, abort)
        watch.connect()  # now, while the group's store surely answers: a first call later may find it gone
        _thread = _WatchdogThread(watch)
        _thread.start()


def stop() -> None:
    """End this process's watchdog thread, if one runs, and wait for it (the process group is gone)."""
    with _lock:
        running = _thread
    if running is not None and running.pid == os.getpid():
        running.stop()


class _WatchdogThread(threading.Thread):
    """The daemon thread that runs a :class:`_Watch` until it is stopped or its process group is destroyed.
    ``stop()`` is the method test suites call on leftover daemon threads."""

    def __init__(self, watch: _Watch) -> None:
        super().__init__(name="fabric-core-hang-watchdog", daemon=True)
        self.watch, self.pid = watch, os.getpid()
        self._stopping = threading.Event()

    @property
    def stopping(self) -> bool:
        """The thread ends, or has ended (a new group needs a new thread)."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """End the thread and wait for it (it wakes at once; a store call under way ends within its timeout)."""
        self._stopping.set()
        if self is not threading.current_thread() and self.is_alive():
            self.join(timeout=30)

    def run(self) -> None:
        watch = self.watch
        watch.me = threading.get_ident()
        # Ends once the group is destroyed: the next group gets a thread of its own.
        while not self._stopping.wait(watch.interval) and dist.is_initialized():
            watch.tick()
        self._stopping.set()


class _Watch:
    """The thread's state: the waits seen, the store, and the requests answered."""

    def __init__(self, rank: int, world_size: int, warn: float, abort: float) -> None:
        self.rank, self.world_size, self.warn, self.abort = rank, world_size, warn, abort
        # A few samples per threshold: a report comes between 1x and 1.25x the threshold (every 5 s at the default).
        self.interval = min(max(min(s for s in (warn, abort) if s) / 4, 0.05), 5.0)
        self.me = 0  # this thread, once it runs
        self.waiting: dict[int, tuple[FrameType, float, bool]] = {}  # thread -> (collective frame, since, reported)
        self.store: Any = None
        self.answered = 0  # the last report request this rank answered

    def tick(self) -> None:
        """One interval's work while the process group exists."""
        self._answer_the_others()
        self._sample()

    # -- this rank's threads --------------------------------------------------------------------------------
    def _sample(self) -> None:
        """Look at every other thread once; report (or stop on) a collective seen waiting long enough."""
        now = time.monotonic()
        current: dict[int, tuple[FrameType, float, bool]] = {}
        for ident, top in sys._current_frames().items():
            frame = _collective_frame(top) if ident != self.me else None
            if frame is not None:
                previous = self.waiting.get(ident)
                same = previous is not None and previous[0] is frame  # the same call goes on
                current[ident] = (frame, previous[1], previous[2]) if same and previous else (frame, now, False)
        # Only the frames of collectives are held until the next sample (which tells a call that goes on
        # from a new call); the stacks looked at are released here.
        self.waiting = current
        for ident, (frame, since, reported) in current.items():
            waited = now - since
            if self.abort and waited >= self.abort:
                self._stop(waited)
            if self.warn and not reported and waited >= self.warn:
                _say(
                    f"[fabric-core rank {self.rank}] {_waiting(frame, waited)}. The other ranks have not all "
                    f"reached this collective. ({HANG_WARN_VARIABLE} sets when this is printed.)"
                )
                _say(self._report())
                current[ident] = (frame, since, True)

    def _position(self) -> tuple[str, bool]:
        """Where this rank's main thread is, in words, and whether it waits in a collective."""
        frames = sys._current_frames()
        main = frames.get(threading.main_thread().ident or -1)
        for ident, (frame, since, _) in self.waiting.items():
            if ident in frames and _collective_frame(frames[ident]) is frame:
                return _waiting(frame, time.monotonic() - since), True
        if main is None:
            return "has no main thread", False
        collective = _collective_frame(main)
        if collective is not None:
            return _waiting(collective, 0.0), True
        return _running(main), False

    def _state(self) -> str:
        where, in_collective = self._position()
        records = [record.as_list() for record in flight_recorder.recorded()]
        return json.dumps(
            {"where": where, "collective": in_collective, "records": records, "count": flight_recorder.next_sequence()}
        )

    # -- the other ranks, through the store -----------------------------------------------------------------
    def connect(self) -> Any:
        """This thread's own connection to the job's store (the main thread may be blocked on its own).

        A new connection is made only while the store's server accepts one: connecting to a server that is
        gone (rank 0 has finished) would retry for the whole process-group timeout, and the strategy's teardown,
        which waits for this thread, with it.
        """
        if self.store is None:
            try:
                default = dist.distributed_c10d._get_default_store()
                if not _answers(default):
                    return None
                store = default.clone()  # type: ignore[attr-defined]
                store.set_timeout(timedelta(seconds=max(self.interval * 2, 5.0)))
                restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
                self.store = dist.PrefixStore(f"fabric_core/hang/{restart}/", store)  # type: ignore[attr-defined]
            except Exception:  # the store's server (in rank 0, or the launcher) is gone
                return None
        return self.store

    def _answer_the_others(self) -> None:
        store = self.connect()
        if store is None:
            return
        try:
            requested = store.add("request", 0)
            if requested > self.answered:
                state = self._state()
                for number in range(self.answered + 1, requested + 1):
                    store.set(f"state/{number}/{self.rank}", state)
                self.answered = requested
            if self.abort and store.check(["abort"]):
                self._leave(store, store.get("abort").decode())
        except Exception:
            self.store = None  # reconnect next time (or find the store gone)

    def _report(self) -> str:
        """Ask every rank where it is and return the table.

        Ranks that start waiting within one exchange of each other share one request (the first opens it,
        the others join), so every rank answers once however many wait. In a job of more than
        :data:`_TABLES_UP_TO` ranks only the rank that opened the request reads every answer and prints the
        table; the others say which rank printed it.
        """
        title = f"[fabric-core rank {self.rank}] where every rank is:"
        store = self.connect()
        if store is None:
            return f"{title} the job's store cannot be reached (its host, rank 0 or the launcher, may have died)."
        states: dict[int, dict[str, Any]] = {}
        window = self.interval + 2.0  # the others answer within one sampling interval
        try:
            number, opener = store.add("request", 0), None
            if number and store.check([f"opened/{number}"]):
                opener_rank, opened = store.get(f"opened/{number}").decode().split()
                if time.time() - float(opened) < window:
                    opener = int(opener_rank)
            if opener is None:
                number = store.add("request", 1)
                store.set(f"opened/{number}", f"{self.rank} {time.time()}")
            store.set(f"state/{number}/{self.rank}", self._state())
            if opener is not None and opener != self.rank and self.world_size > _TABLES_UP_TO:
                return f"[fabric-core rank {self.rank}] rank {opener} prints where every rank is."
            keys = [f"state/{number}/{rank}" for rank in range(self.world_size)]
            with contextlib.suppress(Exception):  # the ranks that do not answer in time are named as such
                store.wait(keys, timedelta(seconds=window))
            for rank, key in enumerate(keys):
                if store.check([key]):
                    states[rank] = json.loads(store.get(key))
        except Exception as error:
            self.store = None
            if not states:
                return f"{title} the job's store stopped answering ({exit_handshake.first_line(error)})."
        return table(title, states, self.world_size)

    def _stop(self, waited: float) -> None:
        """Stop the job: the first rank to get here gathers the report, leaves it for the others, and exits."""
        store = self.connect()
        if store is not None:
            try:
                if store.compare_set("stopping", "", str(self.rank)).decode() != str(self.rank):
                    return  # another rank stops the job; this one answers it, then reads its report
            except Exception:
                store = None
        report = (
            f"a collective waited {waited:.0f} s on rank {self.rank} ({HANG_ABORT_VARIABLE}={self.abort:g}), so the "
            f"job stops on every rank.\n{self._report()}"
        )
        if store is not None:
            with contextlib.suppress(Exception):
                store.set("abort", report)
        self._leave(store, report)

    def _leave(self, store: Any, report: str) -> None:
        """Print ``report`` as this rank's error and exit once every rank has read it (or after one more
        interval): the first rank to exit closes its connections, which ends the others' collectives with errors
        of their own that would bury the report, and the store may live in this process (rank 0's)."""
        _say(f"[fabric-core rank {self.rank}] stopping: {report}")
        deadline = time.monotonic() + self.interval + 2.0
        with contextlib.suppress(Exception):
            if store is not None:
                store.add("stopped", 1)
                while store.add("stopped", 0) < self.world_size and time.monotonic() < deadline:
                    time.sleep(0.02)
        os._exit(ABORT_EXIT_CODE)


def _answers(store: Any) -> bool:
    """Whether the TCP server behind ``store`` (through its prefixes) accepts a connection within a second;
    ``True`` for stores of other kinds (a file store has no server to lose)."""
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    host, port = getattr(store, "host", None), getattr(store, "port", None)
    if not isinstance(host, str) or not isinstance(port, int):
        return True
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        return False
    return True


def table(title: str, states: dict[int, dict[str, Any]], world_size: int) -> str:
    """The report: one row per rank (its position and last calls), then the cause."""
    histories = {rank: [flight_recorder.Record(*r) for r in state["records"]] for rank, state in states.items()}
    counts = {rank: int(state["count"]) for rank, state in states.items()}
    where = {rank: str(state["where"]) for rank, state in states.items()}
    in_collective = {rank: bool(state["collective"]) for rank, state in states.items()}
    unreachable = [rank for rank in range(world_size) if rank not in states]
    lines = [title]
    for rank in range(world_size):
        if rank not in states:
            lines.append(f"  rank {rank}: did not answer (dead, or stuck where Python cannot run)")
            continue
        lines.append(f"  rank {rank}: {where[rank]}")
        shown = histories[rank][-_SHOWN:]
        calls = " | ".join(" ".join(filter(None, (f"#{r.seq} {r.call}", str(r.what or ""), r.site()))) for r in shown)
        lines.append(f"      last calls: {calls or 'none'}")
    lines.append("  cause: " + flight_recorder.explain(histories, counts, where, in_collective, unreachable))
    return "\n".join(lines)


def _say(text: str) -> None:
    """``text`` and its line end on stderr in one write: every rank of a job shares the stream, and ``print``
    writes the line end apart, so another rank's line could start on the last line of a report (and a write
    of up to PIPE_BUF bytes to a pipe is never interleaved)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _collective_frame(top: FrameType) -> FrameType | None:
    """The outermost ``torch.distributed`` collective frame if the thread waits in one (or the frame of the
    exit handler's meeting of the ranks, which waits on the store), else None."""
    if top.f_code is _EXIT_MEETING:
        return top
    if not top.f_globals.get("__name__", "").startswith("torch.distributed"):
        return None
    found = None
    frame: FrameType | None = top
    while frame is not None and frame.f_globals.get("__name__", "").startswith("torch.distributed"):
        if frame.f_globals.get("__name__") == _C10D:
            found = frame
        frame = frame.f_back
    return found


def _waiting(collective: FrameType, waited: float) -> str:
    """``waiting 62 s in `barrier` (ParallelStrategy.barrier -> torch.distributed.barrier), called from f:10``."""
    entry = ""
    frame = collective.f_back
    while frame is not None:
        package = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if package.startswith("fabric_core"):  # the core and its plugins (fabric_core_ddp, ...)
            entry = frame.f_code.co_qualname
        elif package != "torch":
            break
        frame = frame.f_back
    name = collective.f_code.co_name
    if frame is None:
        return f"waiting {waited:.0f} s in fabric-core's exit handler: the script has returned"
    where = f"`{entry.split('.')[-1]}` ({entry} -> torch.distributed.{name})" if entry else f"`{name}`"
    site = f"{flight_recorder.short(frame.f_code.co_filename)}:{frame.f_lineno}"
    return f"waiting {waited:.0f} s in {where}, called from {site}"


def _running(top: FrameType) -> str:
    """``not in a collective: running f.py:15 (in `loop`)``, with the user's line when the top is a library."""
    here = f"{flight_recorder.short(top.f_code.co_filename)}:{top.f_lineno} (in `{top.f_code.co_qualname}`)"
    user: FrameType | None = top
    while user is not None and user.f_globals.get("__name__", "").split(".")[0].startswith(("fabric_core", "torch")):
        user = user.f_back
    if user is top or user is None:
        return f"not in a collective: running {here}"
    site = f"{flight_recorder.short(user.f_code.co_filename)}:{user.f_lineno}"
    return f"not in a collective: in {here}, called from {site}"
