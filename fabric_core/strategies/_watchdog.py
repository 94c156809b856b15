"""A collective that waits too long explains itself: which one, and from where it was called.

One daemon thread per process samples the stacks of the other threads a few times per threshold
(``sys._current_frames``). A thread blocked in a ``torch.distributed`` collective shows that collective's
Python frame on top of its stack; when the same frame is still there after the threshold, the thread prints
the collective, the fabric-core call that issued it, and the user's file and line. The collectives
themselves do nothing for this, so the hot path (``all_reduce`` of a tensor) costs what it did.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import FrameType
from typing import Final

from fabric_core.environments._env import read_seconds

__all__ = ["HANG_WARN_VARIABLE", "hang_warn_seconds", "start"]

#: Seconds a collective may wait before every waiting rank prints where it waits; ``0`` turns this off.
HANG_WARN_VARIABLE: Final = "FABRIC_CORE_HANG_WARN_SECONDS"
_DEFAULT_SECONDS: Final = 60.0
_C10D: Final = "torch.distributed.distributed_c10d"

_started_in_pid: int | None = None


def hang_warn_seconds() -> float:
    """The threshold from :data:`HANG_WARN_VARIABLE` (default 60 s; ``0`` turns the reports off).

    Raises:
        InvalidConfigError: The variable is not a number of seconds >= 0.
    """
    meaning = "0 turns the reports of waiting collectives off"
    return read_seconds(HANG_WARN_VARIABLE, _DEFAULT_SECONDS, meaning, zero_allowed=True)


def start(rank: int) -> None:
    """Start this process's watchdog thread (once per process; a forked child starts its own).

    Raises:
        InvalidConfigError: :data:`HANG_WARN_VARIABLE` is malformed.
    """
    global _started_in_pid
    threshold = hang_warn_seconds()
    if threshold == 0 or _started_in_pid == os.getpid():
        return
    _started_in_pid = os.getpid()
    thread = threading.Thread(target=_watch, args=(rank, threshold), name="fabric-core-hang-watchdog", daemon=True)
    thread.start()


def _watch(rank: int, threshold: float) -> None:
    # A few samples per threshold: a report comes between 1x and 1.25x the threshold. At the default,
    # the thread wakes every 5 s.
    interval = min(max(threshold / 4, 0.05), 5.0)
    me = threading.get_ident()
    waiting: dict[int, tuple[FrameType, float, bool]] = {}  # thread -> (its collective's frame, since, reported)
    while True:
        time.sleep(interval)
        waiting = _sample(rank, threshold, me, waiting)


def _sample(
    rank: int, threshold: float, me: int, waiting: dict[int, tuple[FrameType, float, bool]]
) -> dict[int, tuple[FrameType, float, bool]]:
    """Look at every other thread once; report a collective seen waiting for ``threshold`` s."""
    # A function of its own so that the stacks looked at are released on return: only the frames of
    # collectives are held until the next sample (which tells a call that goes on from a new call).
    now = time.monotonic()
    current: dict[int, tuple[FrameType, float, bool]] = {}
    for ident, top in sys._current_frames().items():
        if ident == me:
            continue
        frame = _collective_frame(top)
        if frame is None:
            continue
        previous = waiting.get(ident)
        since, reported = (previous[1], previous[2]) if previous is not None and previous[0] is frame else (now, False)
        if not reported and now - since >= threshold:
            print(_describe(rank, frame, now - since), file=sys.stderr, flush=True)
            reported = True
        current[ident] = (frame, since, reported)
    return current


def _collective_frame(top: FrameType) -> FrameType | None:
    """The outermost ``torch.distributed`` collective frame if the thread waits in one, else None."""
    if not top.f_globals.get("__name__", "").startswith("torch.distributed"):
        return None
    found = None
    frame: FrameType | None = top
    while frame is not None and frame.f_globals.get("__name__", "").startswith("torch.distributed"):
        if frame.f_globals.get("__name__") == _C10D:
            found = frame
        frame = frame.f_back
    return found


def _describe(rank: int, collective: FrameType, waited: float) -> str:
    entry = ""
    frame = collective.f_back
    while frame is not None:
        package = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if package.startswith("fabric_core"):  # the core and its plugins (fabric_core_ddp, ...)
            entry = frame.f_code.co_qualname
        elif package != "torch":
            break
        frame = frame.f_back
    caller = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "fabric-core's exit handler"
    name = collective.f_code.co_name
    where = f"`{entry.split('.')[-1]}` ({entry} -> torch.distributed.{name})" if entry else f"`{name}`"
    return (
        f"[fabric-core rank {rank}] waiting {waited:.0f} s in {where}, called from {caller}. The other ranks "
        "have not all reached this collective: one may be stuck elsewhere, may have failed, or may call "
        f"collectives in another order. ({HANG_WARN_VARIABLE} sets when this is printed.)"
    )
