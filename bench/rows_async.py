"""Async checkpoints: how long a save blocks the training loop, against a synchronous ``fabric.save``.

The same 50M-parameter model with its Adam state (about 600 MB) is saved by two Fabrics: one with the default
checkpoint I/O (the save returns once the file is written, fsynced and renamed into place) and one with
``plugins=[AsyncCheckpointIO()]`` (the save returns once the tensors are copied to host memory; the write runs
in a background thread). The row's "raw" here is the synchronous ``fabric.save``: the ratio is the share of a
synchronous save that the loop still waits for. Untimed after each save: the background write is waited for,
then ``os.sync()`` and the background deletion of the replaced file, so no round pays for the one before.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import CORE, RAW, Goal, RowResult, interleave, row_result
from rows_checkpoint import model_and_optimizer

__all__ = ["collect"]

ROWS = ("ckpt_async_blocked",)


def _settle() -> None:
    from fabric_core.io.atomic import wait_for_removals

    wait_for_removals()
    os.sync()


def _timed(function: Callable[[], Any], after: Callable[[], Any]) -> float:
    start = time.perf_counter()
    function()
    elapsed = time.perf_counter() - start
    after()
    return elapsed


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure the time ``fabric.save`` blocks with ``AsyncCheckpointIO``, as a ratio to a synchronous save.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        ``ckpt_async_blocked`` (if selected).
    """
    if rows is not None and not set(ROWS) & rows:
        return []
    from fabric_core import Fabric
    from fabric_core.io.async_io import AsyncCheckpointIO

    model, optimizer, count = model_and_optimizer()
    synchronous = Fabric(accelerator="cpu", devices=1)
    background_io = AsyncCheckpointIO()
    background = Fabric(accelerator="cpu", devices=1, plugins=[background_io])
    s_model, s_optimizer = synchronous.setup(model, optimizer)
    b_model, b_optimizer = background.setup(model, optimizer)
    rounds = 4 if quick else 15

    def after_background() -> None:
        background_io.wait()
        _settle()

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_CHECKPOINT_DIR")) as tmp:
        root = Path(tmp)
        measures = {
            RAW: lambda: _timed(
                lambda: synchronous.save(root / "sync.pt", {"model": s_model, "optimizer": s_optimizer}), _settle
            ),
            CORE: lambda: _timed(
                lambda: background.save(root / "async.pt", {"model": b_model, "optimizer": b_optimizer}),
                after_background,
            ),
        }
        values = interleave(measures, rounds=rounds, seed=11, warmup=1)
    return [
        row_result(
            "ckpt_async_blocked",
            f"async checkpoint save ({count / 1e6:.0f}M params + Adam), time the loop is blocked",
            values,
            goal=Goal("<=", 0.15),
            labels={
                RAW: "fabric.save(path, {model, optimizer}) (synchronous: atomic, fsynced)",
                CORE: "fabric.save(...) with Fabric(plugins=[AsyncCheckpointIO()]): until the snapshot is taken",
            },
            note=(
                "The ratio's base is the synchronous fabric.save, not raw torch.save. Untimed after each save: the"
                " background write finishes, then `os.sync()` and the background deletion of the replaced file."
            ),
        )
    ]
