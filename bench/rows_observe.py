"""What watching a run costs: MLP steps/s with the progress bar and the CSV logger on, as a ratio to raw.

Raw PyTorch runs the plain loop. fabric-core runs the loop of ``rows_steps`` plus what a user watching the run
adds: ``callbacks=["progress"]`` drawing a live ``rich`` bar at its default 4 redraws per second (into a
stream that says it is a terminal and discards the text, so the terminal's own speed is not measured) and
``fabric.log("train/loss", loss)`` on every step into a ``CSVLogger``. A third variant, fabric-core without
either, separates the cost of watching from the cost of the framework.
"""

from __future__ import annotations

import copy
import io
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from _harness import CORE, RAW, Goal, RowResult, row_result
from rows_steps import _fabric_step, _interleave_steps, _model, _raw_step
from torch import nn

__all__ = ["collect"]

PLAIN = "fabric-core, no bar or logger"


class _Terminal(io.TextIOBase):
    """A terminal that shows nothing: the bar draws as on a real one, the text is dropped."""

    def isatty(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)


def _watched_step(
    fabric: Any, model: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[Callable[[], None], Callable[[], None]]:
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))

    def step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        fabric.log("train/loss", loss)

    def close() -> None:
        fabric.call("on_train_end")
        fabric.logger.finalize("success")

    return step, close


def _row(quick: bool) -> RowResult:
    from fabric_core import Fabric, spec
    from fabric_core.loggers import CSVLogger

    base, x, y = _model("mlp")
    with tempfile.TemporaryDirectory() as folder:
        watched = Fabric(
            accelerator="cpu",
            devices=1,
            loggers=CSVLogger(folder),
            callbacks=[spec("progress", stream=_Terminal())],
        )
        watched_step, close = _watched_step(watched, copy.deepcopy(base), x, y)
        steps: dict[str, Callable[[], None]] = {
            RAW: _raw_step(copy.deepcopy(base), x, y, "32-true"),
            CORE: watched_step,
            PLAIN: _fabric_step(Fabric(accelerator="cpu", devices=1), copy.deepcopy(base), x, y),
        }
        values, repeat = _interleave_steps(steps, quick, seed=5)
        close()
    return row_result(
        "steps_mlp_watched",
        "steps/s MLP 784-256-10, batch 64, fp32, with the progress bar and the CSV logger",
        values,
        metric="rate",
        goal=Goal(">=", 0.97),
        labels={
            CORE: 'callbacks=["progress"] (live bar, 4 redraws/s) + CSVLogger, fabric.log every step',
            PLAIN: "the same loop without the bar and the logger",
        },
        note=f"SGD; {repeat} steps per timed block; absolute values are seconds per step.",
    )


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure ``steps_mlp_watched`` (when selected).

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        The rows measured.
    """
    return [_row(quick)] if rows is None or "steps_mlp_watched" in rows else []
