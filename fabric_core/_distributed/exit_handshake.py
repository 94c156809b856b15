"""How a process with a process group ends: whether it failed, and a barrier that cannot hang."""

from __future__ import annotations

import sys
from datetime import timedelta
from types import TracebackType
from typing import Any, Final

import torch.distributed as dist

from fabric_core.environments._env import read_seconds
from fabric_core.launchers._failure import failed, record_failure

__all__ = [
    "EXIT_TIMEOUT_VARIABLE",
    "bounded_barrier",
    "exit_timeout",
    "failed",
    "first_line",
    "record_failure",
    "watch_uncaught_exceptions",
]

#: Seconds the ranks wait for each other when the process group is closed (at teardown and at exit).
EXIT_TIMEOUT_VARIABLE: Final = "FABRIC_CORE_EXIT_TIMEOUT"
# Ranks that finish normally reach the end within moments of each other; a rank that has not come after
# this long is stuck (e.g. in a collective this rank never issues) and waiting longer only delays the error.
_DEFAULT_EXIT_SECONDS: Final = 60.0

_rounds = 0


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


def exit_timeout() -> timedelta:
    """How long the ranks wait for each other when the process group closes: :data:`EXIT_TIMEOUT_VARIABLE`.

    Raises:
        InvalidConfigError: The variable is not a positive number of seconds.
    """
    meaning = f"how long the ranks wait for each other at exit; default {_DEFAULT_EXIT_SECONDS:.0f}"
    return timedelta(seconds=read_seconds(EXIT_TIMEOUT_VARIABLE, _DEFAULT_EXIT_SECONDS, meaning))


def bounded_barrier(timeout: timedelta) -> bool:
    """Meet the other ranks, waiting at most ``timeout``; say on stderr which ranks did not come.

    The ranks meet through the process group's key-value store, whose wait honours its timeout whatever the
    other ranks do. (gloo's ``monitored_barrier`` does not: a rank other than 0 waits in it forever while
    rank 0 is stuck in another collective, e.g. a ``fabric.save`` that only rank 0 called.) Once every rank
    has arrived, a plain barrier follows on gloo: a rank that destroys its connections while a peer's last
    message is in flight aborts the process at exit (``terminate called without an active exception``); the
    plain barrier, which every rank leaves only after the others' messages arrived, cannot then wait for a
    missing rank.

    Returns:
        Whether every rank arrived.
    """
    rank = dist.get_rank()
    try:
        _store_barrier(timeout)
        if dist.get_backend() == "gloo":
            dist.barrier()
    except Exception as error:  # a peer is stuck, or died and closed its connections
        print(
            f"[fabric-core rank {rank}] the ranks did not all reach the end of the job within "
            f"{timeout.total_seconds():g} s ({EXIT_TIMEOUT_VARIABLE}); closing without them. "
            f"A rank that did not arrive is stuck (e.g. in a collective the others never issue) or failed. "
            f"Cause: {first_line(error)}",
            file=sys.stderr,
            flush=True,
        )
        return False
    return True


def _store_barrier(timeout: timedelta) -> None:
    global _rounds
    _rounds += 1
    store = dist.distributed_c10d._get_default_store()
    prefix = f"fabric_core/exit/{_rounds}/"
    store.set(f"{prefix}{dist.get_rank()}", "1")
    keys = [f"{prefix}{r}" for r in range(dist.get_world_size())]
    try:
        store.wait(keys, timeout)
    except Exception:
        missing = [r for r, key in enumerate(keys) if not _arrived(store, key)]
        raise RuntimeError(f"ranks {missing} did not arrive") from None


def _arrived(store: Any, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # the store's server (rank 0) is gone
        return False


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or its type's name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
