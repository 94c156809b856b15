"""How a process with a process group ends: whether it failed, and a barrier that cannot hang."""

from __future__ import annotations

import sys
from datetime import timedelta
from types import TracebackType

import torch.distributed as dist

__all__ = ["bounded_barrier", "failed", "record_failure", "watch_uncaught_exceptions"]

_failed = False


def record_failure() -> None:
    """Note that this process is ending with an error (its peers may never reach another collective)."""
    global _failed
    _failed = True


def failed() -> bool:
    """Whether this process recorded an error (an uncaught exception, or a launcher's worker that raised)."""
    return _failed


def watch_uncaught_exceptions() -> None:
    """Record an uncaught exception: Python reports it through ``sys.excepthook`` before atexit handlers run."""
    previous = sys.excepthook
    if getattr(previous, "_fabric_core_watch", False):
        return

    def hook(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
        record_failure()
        previous(kind, value, traceback)

    hook._fabric_core_watch = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def bounded_barrier(timeout: timedelta) -> None:
    """A barrier that gives up, silently, instead of hanging when a peer is gone."""
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timeout)
        else:
            work = dist.barrier(async_op=True)
            assert work is not None
            work.wait(timeout=timeout)
    except Exception:  # a peer that died closed its connections: there is nothing left to wait for
        pass
