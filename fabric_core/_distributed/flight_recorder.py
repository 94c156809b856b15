"""The flight recorder: the last calls of ``Fabric``'s collectives in this process, and what they tell together.

Each call of a ``Fabric`` method that every rank must make (``setup``, ``barrier``, ``broadcast``,
``all_gather``, ``all_reduce``, ``save``, ``load``, ...) appends one record to a small ring buffer: its
sequence number, the method, what it was given (a tensor's dtype and shape, a barrier's name, a path) and the
user's file and line. Recording is a frame lookup and a deque append, with nothing formatted until a report
needs it. When a collective waits too long, :mod:`~fabric_core._distributed.watchdog` gathers every rank's
records through the job's store and :func:`explain` finds the first call at which the ranks differ.

The same records serve the opt-in check (``FABRIC_CORE_CHECK_COLLECTIVES=1``, see
:mod:`~fabric_core._distributed.collective_check`), which compares them across ranks before each collective runs.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any, Final, NamedTuple

from torch import Tensor

__all__ = [
    "EVERY_RANK_CALLS",
    "Record",
    "caller",
    "describe",
    "explain",
    "last",
    "next_sequence",
    "record",
    "recorded",
    "short",
    "tensor_summary",
    "user_frame",
]

#: How many calls each process keeps.
SIZE: Final = 64
#: The calls whose being collective surprises users: each must be called on every rank.
EVERY_RANK_CALLS: Final = frozenset({"save", "load", "load_raw", "setup", "setup_module"})
# Modules whose frames are not the user's: fabric-core itself and its plugins (fabric_core_ddp, ...).
_OURS: Final = "fabric_core"


class Record(NamedTuple):
    """One call: its sequence number in this process, the ``Fabric`` method, what it got, and where from."""

    seq: int
    call: str
    what: Any
    file: str
    line: int

    def same_call(self, other: Record) -> bool:
        """Whether the ranks agree on this call (the site may differ: two branches may issue the same call)."""
        return self.call == other.call and describe(self.what) == describe(other.what)

    def site(self) -> str:
        return f"{short(self.file)}:{self.line}"

    def as_list(self) -> list[Any]:
        """A JSON-ready copy (the description formatted)."""
        return [self.seq, self.call, describe(self.what), self.file, self.line]


_records: deque[tuple[int, str, Any, str, int]] = deque(maxlen=SIZE)
_count = 0


def short(path: str) -> str:
    """``path`` relative to the working folder when it lies below it (as the user typed the script's name)."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The first frame at or above ``frame`` outside fabric-core: the user's call."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_OURS):
        frame = frame.f_back
    return frame


def caller() -> tuple[str, int]:
    """The user's file and line: the first frame outside fabric-core above this function's caller."""
    frame = user_frame(sys._getframe(1))
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("<unknown>", 0)


def record(call: str, what: Any = None) -> None:
    """Record a call of ``Fabric.<call>`` made from the user's code (call this first thing in the method).

    ``what`` must be cheap and immutable: a tensor's ``(dtype, shape)`` (see :func:`tensor_summary`) or a
    short string (``"'eval'"`` for a barrier's name, ``"src=0"``). The hot path of every collective: a plain
    tuple is kept, and :func:`recorded` makes records of them.
    """
    global _count
    frame = user_frame(sys._getframe(2))
    if frame is None:
        _records.append((_count, call, what, "<unknown>", 0))
    else:
        _records.append((_count, call, what, frame.f_code.co_filename, frame.f_lineno))
    _count += 1


def last() -> Record:
    """The newest record (of the call being made, right after :func:`record`)."""
    return Record._make(_records[-1])


def next_sequence() -> int:
    """The sequence number the next recorded call gets (the number of calls recorded so far)."""
    return _count


def recorded() -> list[Record]:
    """The kept records, oldest first (safe to call from another thread)."""
    for _ in range(10):
        try:
            return [Record._make(entry) for entry in list(_records)]
        except RuntimeError:  # appended to while being copied
            continue
    return []


def describe(what: Any) -> str:
    """What a call was given, in words: ``float32[2, 3]`` from ``(dtype, shape)``; a string as it is."""
    if what is None:
        return ""
    if isinstance(what, tuple) and len(what) == 2 and hasattr(what[0], "is_floating_point"):
        dtype, shape = what
        return f"{str(dtype).removeprefix('torch.')}[{', '.join(str(s) for s in shape)}]"
    return str(what)


def tensor_summary(data: Any) -> Any:
    """What :func:`record` keeps of a collective's data: ``(dtype, shape)`` of a tensor, else its type's name."""
    if isinstance(data, Tensor):
        return (data.dtype, data.shape)
    return type(data).__name__


# -- what the records of every rank tell together ----------------------------------------------------------
def _label(record: Record) -> str:
    what = describe(record.what)
    return f"`fabric.{record.call}`" + (f" ({what})" if what else "")


def first_difference(histories: Mapping[int, Sequence[Record]], counts: Mapping[int, int]) -> int | None:
    """The first sequence number at which the ranks' calls differ, among those every rank still keeps.

    Args:
        histories: Each rank's kept records.
        counts: Each rank's number of calls so far (a rank without a record of a number has not made it yet).
    """
    if not histories:
        return None
    start = max(min((r.seq for r in records), default=counts[rank]) for rank, records in histories.items())
    end = max(counts.values())
    by_seq = {rank: {r.seq: r for r in records} for rank, records in histories.items()}
    for seq in range(start, end):
        calls = [by_seq[rank].get(seq) for rank in histories]
        first = calls[0]
        if any(c is None for c in calls) or any(first is not None and not first.same_call(c) for c in calls if c):
            return seq
    return None


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 3`` or ``ranks 0, 1, 2``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def explain(
    histories: Mapping[int, Sequence[Record]],
    counts: Mapping[int, int],
    where: Mapping[int, str],
    in_collective: Mapping[int, bool],
    unreachable: Sequence[int],
) -> str:
    """One or two sentences naming the cause of a wait, from what every reachable rank reported.

    Args:
        histories: The records of each rank that answered.
        counts: Their numbers of calls.
        where: What each rank is doing now, in words.
        in_collective: Whether each rank waits in a collective.
        unreachable: The ranks that did not answer.
    """
    seq = first_difference(histories, counts)
    if seq is not None:
        return _diverged(seq, histories, where, in_collective)
    outside = [rank for rank in histories if not in_collective.get(rank, False)]
    if outside:
        return (
            f"The ranks agree on every call kept, but {ranks_text(outside)} "
            f"{'is' if len(outside) == 1 else 'are'} not in a collective ({where[outside[0]]}): the others wait "
            "for it to arrive."
        )
    if unreachable:
        return (
            f"{ranks_text(unreachable)} did not answer: it may have died, or be stuck where Python cannot run "
            "(a long call in C that holds the GIL). The ranks that answered agree on every call kept."
        )
    return (
        "Every rank waits in a collective and they agree on every call kept: the collective itself is stuck "
        "(a network link or a device), or the ranks issue torch.distributed calls of their own in another order."
    )


def _diverged(
    seq: int, histories: Mapping[int, Sequence[Record]], where: Mapping[int, str], in_collective: Mapping[int, bool]
) -> str:
    calls = {rank: next((r for r in records if r.seq == seq), None) for rank, records in histories.items()}
    groups: dict[str, list[int]] = {}
    for rank, call in calls.items():
        key = "" if call is None else f"{_label(call)}|{call.site()}"
        groups.setdefault(key, []).append(rank)
    made = [(ranks, call) for key, ranks in groups.items() if key and (call := calls[ranks[0]]) is not None]
    missing = groups.get("", [])
    surprising = sorted({call.call for _, call in made if call.call in EVERY_RANK_CALLS})
    if missing and len(made) == 1:
        (ranks, call), one = made[0], len(missing) == 1
        sentence = (
            f"{ranks_text(ranks)} reached call #{seq}, {_label(call)} ({call.site()}), which {ranks_text(missing)} "
            f"{'has' if one else 'have'} not made: {'it is' if one else 'they are'} {where[missing[0]]}."
        )
    else:
        parts = [f"{ranks_text(ranks)} called {_label(call)} ({call.site()})" for ranks, call in made]
        if missing:
            one = len(missing) == 1
            parts.append(
                f"{ranks_text(missing)} made no call #{seq}: {'it is' if one else 'they are'} {where[missing[0]]}"
            )
        sentence = f"The ranks differ from call #{seq} on: " + "; ".join(parts) + "."
    if surprising:
        names = " and ".join(f"`fabric.{name}`" for name in surprising)
        return sentence + (
            f" {names} must be called on every rank (the strategy decides which ranks write or read); "
            "calling it on some ranks only leaves the others waiting."
        )
    if missing and len(made) == 1 and not any(in_collective.get(rank, False) for rank in missing):
        return sentence + (
            " If it is only slower (a long step, data loading on one rank), raise FABRIC_CORE_HANG_WARN_SECONDS; "
            "otherwise it skips the call or never gets there."
        )
    return sentence + " Every rank must issue the same collectives, with the same shapes, in the same order."
