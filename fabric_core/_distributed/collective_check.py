"""Ranks that reach different collectives fail at once, on every rank, naming what each rank called and where.

Two checks share one mechanism, a small ``all_gather`` of fixed size (so that it meets on every rank whatever
each rank is about to do) followed, only on a mismatch, by an exchange of the calls' descriptions:

- **Named barriers**, always: every barrier of a parallel strategy gathers a code of its name (unnamed
  barriers agree with each other, as in Lightning). Ranks at barriers of different names raise
  :class:`~fabric_core.errors.CollectiveMismatchError` naming both, instead of passing each other and
  hanging later (the internal barrier of ``fabric.save`` is named, so a save on rank 0 only meets the
  other ranks' barrier and fails there, naming the save).
- **The collective check**, opt in with ``FABRIC_CORE_CHECK_COLLECTIVES=1``: before each ``Fabric``
  collective, the ranks compare the call's sequence number, method, and tensor dtype and shape. It costs
  one small collective per call (about doubling the time of a small ``all_reduce``): a switch for
  debugging, not for production runs.
"""

from __future__ import annotations

import os
import zlib
from typing import Any, Final

import torch
import torch.distributed as dist

from fabric_core._distributed import flight_recorder
from fabric_core.errors import CollectiveMismatchError

__all__ = ["CHECK_VARIABLE", "check", "check_call", "checking", "configure", "meet"]

#: The switch of the collective check (``1``/``true``/``yes`` on).
CHECK_VARIABLE: Final = "FABRIC_CORE_CHECK_COLLECTIVES"
#: Names of the barriers that end ``Fabric``'s own calls, as the user's code names those calls.
INTERNAL_BARRIERS: Final = {"fabric.save": "fabric.save", "fabric.load": "fabric.load"}

checking = False


def _gather_into(output: torch.Tensor, mine: torch.Tensor) -> None:
    # torch 2.13 renamed `all_gather_into_tensor` (which now warns) to `all_gather_single`. Looked up when
    # called: a torch built without torch.distributed must still import this module.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(output, mine)


def configure() -> None:
    """Read :data:`CHECK_VARIABLE` (when the process group is created).

    Raises:
        InvalidConfigError: The variable is not a boolean.
    """
    global checking
    from fabric_core._switches import env_flag

    checking = env_flag(os.environ, CHECK_VARIABLE, False)


def _code(text: str | None) -> int:
    return 0 if text is None else zlib.crc32(text.encode()) + 1


def _disagree(codes: list[int], device: torch.device) -> bool:
    mine = torch.tensor(codes, dtype=torch.int64, device=device)
    gathered = torch.empty(dist.get_world_size() * len(codes), dtype=torch.int64, device=device)
    _gather_into(gathered, mine)
    rows = gathered.view(-1, len(codes)).tolist()
    return any(row != rows[0] for row in rows)


def _every_ranks(mine: str) -> dict[int, str]:
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return dict(enumerate(everyone))


def _grouped(calls: dict[int, str]) -> str:
    groups: dict[str, list[int]] = {}
    for rank, text in calls.items():
        groups.setdefault(text, []).append(rank)
    return "; ".join(f"{flight_recorder.ranks_text(ranks)}: {text}" for text, ranks in groups.items())


def _barrier_text(name: str | None) -> str:
    if name is None:
        return "an unnamed barrier"
    if name in INTERNAL_BARRIERS:
        return f"the barrier that ends `{INTERNAL_BARRIERS[name]}`"
    return f"barrier {name!r}"


def meet(name: str | None, device: torch.device) -> None:
    """A barrier that fails on every rank when the ranks reach barriers of different names.

    Raises:
        CollectiveMismatchError: The ranks' barrier names differ (naming each rank's barrier and call site).
    """
    if not _disagree([_code(name)], device):
        return
    file, line = flight_recorder.caller()
    calls = _every_ranks(f"{_barrier_text(name)} ({flight_recorder.short(file)}:{line})")
    raise CollectiveMismatchError(
        f"The ranks reached different barriers: {_grouped(calls)}. Every rank must reach the same barriers in the "
        "same order; a call that ends in a barrier (`fabric.save`, `fabric.load`) must be made on every rank.",
        calls=calls,
    )


def check_call(entry: flight_recorder.Record, strategy: Any) -> None:
    """:func:`check` on ``strategy``'s collective device, when a process group with several ranks exists."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return
    device = strategy._collective_device() if hasattr(strategy, "_collective_device") else strategy.root_device
    check(entry, device)


def check(entry: flight_recorder.Record, device: torch.device) -> None:
    """With the check on, compare ``entry`` (this rank's call about to run) with every rank's.

    Raises:
        CollectiveMismatchError: The ranks' calls differ in sequence number, method, or dtype and shape.
    """
    what = flight_recorder.describe(entry.what) if entry.call not in ("save", "load", "load_raw") else ""
    if not _disagree([entry.seq, _code(entry.call), _code(what)], device):
        return
    label = f"#{entry.seq} `fabric.{entry.call}`" + (f" {what}" if what else "")
    calls = _every_ranks(f"{label} ({entry.site()})")
    raise CollectiveMismatchError(
        f"The ranks are about to issue different collectives ({CHECK_VARIABLE}=1): {_grouped(calls)}. Every "
        "rank must issue the same collectives, with the same dtypes and shapes, in the same order.",
        calls=calls,
    )
