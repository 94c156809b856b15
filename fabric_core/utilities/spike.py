"""Stop a run when the loss spikes, and record which batches to skip when it resumes."""

from __future__ import annotations

import json
import math
import os
from collections import deque
from typing import TYPE_CHECKING, Any, Literal

import torch

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.types import _PATH

if TYPE_CHECKING:
    from fabric_core.fabric import Fabric

__all__ = ["SpikeDetection", "TrainingSpikeException"]


class TrainingSpikeException(RuntimeError):
    """Raised on every rank when :class:`SpikeDetection` saw a loss spike on any rank."""

    def __init__(self, batch_idx: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(f"Training spike detected in batch {batch_idx}", *args, **kwargs)
        self.batch_idx = batch_idx


class SpikeDetection:
    """A callback that stops training with :class:`TrainingSpikeException` when the loss spikes.

    Register it with ``Fabric(callbacks=[SpikeDetection()])`` and call
    ``fabric.call("on_train_batch_end", fabric=fabric, loss=loss, batch=batch, batch_idx=i)`` after each step.
    A value is a spike when it is not finite (with ``finite_only``), or when it is worse than the previous
    value and differs from the running mean of the last ``window`` values by at least ``atol`` and by at
    least ``rtol`` times that mean. Each rank checks its own loss; a spike on any rank stops all of them.
    The batch of the spike and the one before it (which may have corrupted the weights) are written, as a
    JSON list, to ``exclude_batches_path`` so that the resumed run can skip them.

    Args:
        mode: ``"min"`` if a lower value is better (a loss), ``"max"`` if higher is.
        window: How many recent values the running mean covers.
        warmup: Batches (by ``batch_idx``) before spikes are looked for.
        atol: Smallest absolute distance from the running mean that counts; ``None`` for no bound.
        rtol: Smallest distance relative to the running mean that counts; ``None`` for no bound.
        exclude_batches_path: A ``.json`` file, or a folder for ``skip_batches.json``; default: the current
            working directory.
        finite_only: If ``True``, a non-finite value is a spike. If ``False``, non-finite values are not
            spikes, and are left out of the running mean.
    """

    def __init__(
        self,
        mode: Literal["min", "max"] = "min",
        window: int = 10,
        warmup: int = 1,
        atol: float | None = None,
        rtol: float | None = 2.0,
        exclude_batches_path: _PATH | None = None,
        finite_only: bool = True,
    ) -> None:
        if mode not in ("min", "max"):
            raise InvalidConfigError(
                f"`SpikeDetection(mode={mode!r})`: expected 'min' or 'max'.", argument="mode", value=mode
            )
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InvalidConfigError(
                f"`SpikeDetection(window={window!r})`: expected an integer >= 1.", argument="window", value=window
            )
        self.mode = mode
        self.warmup = warmup
        self.atol = atol
        self.rtol = rtol
        self.exclude_batches_path = exclude_batches_path
        self.finite_only = finite_only
        self.bad_batches: list[int] = []
        self.last_val: torch.Tensor | float = 0.0
        # Per value: (sum of its elements, element count), so a tensor loss weighs by its size.
        self._window: deque[tuple[float, int]] = deque(maxlen=window)

    @property
    def running_mean(self) -> float:
        """Mean of the values in the window (NaN while it is empty)."""
        count = sum(n for _, n in self._window)
        return sum(s for s, _ in self._window) / count if count else math.nan

    @torch.no_grad()
    def on_train_batch_end(self, fabric: Fabric, loss: torch.Tensor, batch: Any, batch_idx: int) -> None:
        """Check ``loss`` for a spike; raise :class:`TrainingSpikeException` on every rank if any rank saw one."""
        path = os.getcwd() if self.exclude_batches_path is None else os.fspath(self.exclude_batches_path)
        self.exclude_batches_path = path if path.endswith(".json") else os.path.join(path, "skip_batches.json")
        is_spike = batch_idx >= self.warmup and self._is_spike(loss)
        strategy = fabric.strategy
        strategy.barrier()
        if strategy.reduce_boolean_decision(is_spike, all=False):
            self._handle_spike(fabric, batch_idx)
        finite_everywhere = self.finite_only or strategy.reduce_boolean_decision(
            bool(torch.isfinite(loss).all()), all=True
        )
        if finite_everywhere:
            self._window.append((float(loss.detach().double().sum()), loss.numel()))
            self.last_val = loss

    def _is_spike(self, loss: torch.Tensor) -> bool:
        if self.finite_only and not bool(torch.isfinite(loss).all()):
            return True
        change = loss - self.last_val
        improved = (change <= 0) if self.mode == "min" else (change >= 0)
        if bool(improved.all()):
            return False
        mean = self.running_mean
        distance = abs(loss - mean)
        # A comparison with NaN (empty window) is False: no spike before the first value was recorded.
        beyond_atol = self.atol is None or bool(distance >= abs(self.atol))
        beyond_rtol = self.rtol is None or bool(distance >= abs(self.rtol * mean))
        return beyond_atol and beyond_rtol

    def _handle_spike(self, fabric: Fabric, batch_idx: int) -> None:
        self.bad_batches.extend([batch_idx - 1, batch_idx])
        if fabric.global_rank == 0:
            path = str(self.exclude_batches_path)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as file:
                json.dump(self.bad_batches, file, indent=4)
        raise TrainingSpikeException(batch_idx=batch_idx)

    def state_dict(self) -> dict[str, Any]:
        """The detector's settings, recorded bad batches and running window, for a checkpoint."""
        last = self.last_val.item() if isinstance(self.last_val, torch.Tensor) else self.last_val
        return {
            "last_val": last,
            "mode": self.mode,
            "warmup": self.warmup,
            "atol": self.atol,
            "rtol": self.rtol,
            "bad_batches": list(self.bad_batches),
            "bad_batches_path": self.exclude_batches_path,
            "running": {"window": list(self._window), "maxlen": self._window.maxlen},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.last_val = state_dict["last_val"]
        self.mode = state_dict["mode"]
        self.warmup = state_dict["warmup"]
        self.atol = state_dict["atol"]
        self.rtol = state_dict["rtol"]
        self.bad_batches = list(state_dict["bad_batches"])
        self.exclude_batches_path = state_dict["bad_batches_path"]
        running = state_dict["running"]
        self._window = deque((tuple(item) for item in running["window"]), maxlen=running["maxlen"])

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
