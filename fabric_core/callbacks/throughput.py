"""A callback that measures optimizer steps per second and logs them."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from fabric_core.errors import InvalidConfigError

__all__ = ["ThroughputMonitor"]


class ThroughputMonitor:
    """Logs ``throughput/steps_per_sec`` (and ``samples_per_sec`` when a batch size is given).

    Select it by name, ``Fabric(callbacks=["throughput"])`` or ``spec("throughput", log_every_n_steps=50)``.
    It counts optimizer steps through the ``on_after_optimizer_step`` event that fabric-core's optimizer
    wrapper sends, over a sliding window of the last ``window`` steps.

    Args:
        log_every_n_steps: Log every this many optimizer steps.
        window: Steps in the sliding window the rate is computed over.
        batch_size: Samples per step and process, to also log ``samples_per_sec`` (all processes together).
    """

    def __init__(self, log_every_n_steps: int = 10, window: int = 50, batch_size: int | None = None) -> None:
        for arg, value in (("log_every_n_steps", log_every_n_steps), ("window", window)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfigError(
                    f"`ThroughputMonitor({arg}={value!r})`: expected an integer >= 1.", argument=arg, value=value
                )
        self.log_every_n_steps = log_every_n_steps
        self.batch_size = batch_size
        self.steps = 0
        self._times: deque[float] = deque(maxlen=window + 1)
        self._fabric: Any = None

    def on_after_setup(self, fabric: Any, module: Any) -> None:
        self._fabric = fabric

    def on_after_optimizer_step(self, strategy: Any, optimizer: Any) -> None:
        self._times.append(time.perf_counter())
        self.steps += 1
        if self.steps % self.log_every_n_steps == 0 and self._fabric is not None:
            metrics = self.compute()
            if metrics:
                self._fabric.log_dict(metrics, step=self.steps)

    def compute(self) -> dict[str, float]:
        """The current rates (empty until two steps have been seen)."""
        if len(self._times) < 2:
            return {}
        elapsed = self._times[-1] - self._times[0]
        if elapsed <= 0:
            return {}
        rate = (len(self._times) - 1) / elapsed
        metrics = {"throughput/steps_per_sec": rate}
        if self.batch_size is not None:
            world_size = getattr(self._fabric, "world_size", 1)
            metrics["throughput/samples_per_sec"] = rate * self.batch_size * world_size
        return metrics
