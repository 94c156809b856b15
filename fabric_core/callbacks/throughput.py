"""A callback that logs steps, samples, tokens and FLOPs per second, and MFU, through ``fabric.log_dict``."""

from __future__ import annotations

import math
import time
from typing import Any

from fabric_core.errors import InvalidConfigError

__all__ = ["ThroughputMonitor"]


class ThroughputMonitor:
    """Log training throughput every ``log_every_n_steps`` optimizer steps.

    Select it by name, ``Fabric(callbacks=["throughput"])`` or ``spec("throughput", batch_size=32)``. It
    counts optimizer steps through the ``on_after_optimizer_step`` event of fabric-core's optimizer wrapper
    and computes the rates with :class:`~fabric_core.utilities.throughput.Throughput` over the last
    ``window`` logging intervals. Keys, under ``throughput/``:

    - ``steps_per_sec``; ``samples_per_sec`` with ``batch_size``; ``tokens_per_sec`` with
      ``tokens_per_sample`` (or the ``tokens`` the loop reports); ``flops_per_sec`` with ``flops_per_step``;
      ``mfu`` with ``flops_per_step`` and known peak FLOPs. These are for all processes together: this
      process's rate times the world size, as all processes step together on alike devices.
    - ``device/samples_per_sec``, ``device/tokens_per_sec``, ``device/flops_per_sec``, ``device/mfu``: the
      same for this process alone.

    MFU (model FLOPs utilization) is ``device/flops_per_sec`` over the device's peak FLOPs per second:
    ``available_flops`` if given, else :func:`~fabric_core.utilities.throughput.get_available_flops` for
    the device and the precision's compute dtype (known for common GPUs, dense peaks; unknown on the CPU).

    Settings the loop only knows later go through an event, e.g. the FLOPs measured on the built model::

        flops = measure_flops(model, lambda: model(x), lambda y: y.sum())
        fabric.call("on_train_start", flops_per_step=flops)

    and per-step sizes that vary (padding-free batches) with ``fabric.call("on_train_batch_end", samples=...,
    tokens=...)`` before the optimizer step.

    Args:
        log_every_n_steps: Log every this many optimizer steps.
        window: Logging intervals the rates are averaged over (the latest one by default).
        batch_size: Samples per step on each process.
        tokens_per_sample: Tokens (items) per sample, for ``tokens_per_sec``.
        flops_per_step: FLOPs of one training step on one process (:func:`measure_flops` of forward, loss
            and backward, times micro-batches per optimizer step).
        available_flops: Peak FLOPs per second of one device, for MFU where the table has none (a CPU).

    Raises:
        InvalidConfigError: An option has a wrong type or value (also a ``ValueError``).
    """

    def __init__(
        self,
        log_every_n_steps: int = 10,
        window: int = 1,
        batch_size: int | None = None,
        tokens_per_sample: int | None = None,
        flops_per_step: float | None = None,
        available_flops: float | None = None,
    ) -> None:
        for arg, value in (("log_every_n_steps", log_every_n_steps), ("window", window)):
            _check_count(arg, value)
        self._settings(batch_size=batch_size, tokens_per_sample=tokens_per_sample, flops_per_step=flops_per_step)
        if available_flops is not None:
            _check_positive("available_flops", available_flops)
        self.log_every_n_steps = log_every_n_steps
        self.window = window
        self.available_flops = available_flops
        self.steps = 0
        self._fabric: Any = None
        self._throughput: Any = None
        self._start = 0.0
        self._last_steps = 0
        # Running totals on this process; `_batch_*`: what `on_train_batch_end` reported since the last step.
        self._samples = self._tokens = 0
        self._batch_samples: int | None = None
        self._batch_tokens: int | None = None

    def _settings(self, **settings: Any) -> None:
        for arg in ("batch_size", "tokens_per_sample"):
            value = settings.get(arg)
            if value is not None:
                _check_count(arg, value)
        if settings.get("flops_per_step") is not None:
            _check_positive("flops_per_step", settings["flops_per_step"])
        self.batch_size: int | None = settings.get("batch_size")
        self.tokens_per_sample: int | None = settings.get("tokens_per_sample")
        self.flops_per_step: float | None = settings.get("flops_per_step")

    # -- events ------------------------------------------------------------------------------------------
    def on_after_setup(self, fabric: Any) -> None:
        self._fabric = fabric

    def on_train_start(
        self, batch_size: int | None = None, tokens_per_sample: int | None = None, flops_per_step: float | None = None
    ) -> None:
        """Set what the loop knows once the model and data exist (``None`` keeps the current setting)."""
        self._settings(
            batch_size=self.batch_size if batch_size is None else batch_size,
            tokens_per_sample=self.tokens_per_sample if tokens_per_sample is None else tokens_per_sample,
            flops_per_step=self.flops_per_step if flops_per_step is None else flops_per_step,
        )

    def on_train_batch_end(self, samples: int | None = None, tokens: int | None = None) -> None:
        """Count this step's samples and tokens when they vary from step to step (several calls add up)."""
        if samples is not None:
            self._batch_samples = (self._batch_samples or 0) + int(samples)
        if tokens is not None:
            self._batch_tokens = (self._batch_tokens or 0) + int(tokens)

    def on_after_optimizer_step(self) -> None:
        self.steps += 1
        samples = self._batch_samples if self._batch_samples is not None else self.batch_size
        tokens = self._batch_tokens
        self._batch_samples = self._batch_tokens = None
        if self.steps == 1:
            # The clock starts at the first step's end: that step's own time (warm-up, compilation) is not
            # measured, so neither are its samples.
            self._start = time.perf_counter()
            return
        if samples is not None:
            self._samples += samples
            if tokens is None and self.tokens_per_sample is not None:
                tokens = samples * self.tokens_per_sample
        self._tokens += tokens or 0
        if self.steps % self.log_every_n_steps == 0:
            self._update()
            if self._fabric is not None:
                metrics = self.compute()
                if metrics:
                    self._fabric.log_dict(metrics, step=self.steps)

    # -- rates -------------------------------------------------------------------------------------------
    def compute(self) -> dict[str, float]:
        """The rates of the last ``window`` logging intervals (empty before the second logging point)."""
        if self._throughput is None:
            return {}
        raw = self._throughput.compute()
        world = self._throughput.world_size
        # `Throughput` adds the all-processes keys only for several processes; these are always there.
        metrics: dict[str, float] = {}
        if "device/batches_per_sec" not in raw:
            return metrics
        metrics["throughput/steps_per_sec"] = raw["device/batches_per_sec"]
        for name, key in (("samples_per_sec", "samples"), ("tokens_per_sec", "items"), ("flops_per_sec", "flops")):
            device_rate = raw.get(f"device/{key}_per_sec")
            if device_rate is None or (key == "samples" and self._samples == 0):
                continue
            metrics[f"throughput/device/{name}"] = device_rate
            metrics[f"throughput/{name}"] = device_rate * world
        if "device/mfu" in raw:
            metrics["throughput/device/mfu"] = metrics["throughput/mfu"] = raw["device/mfu"]
        return metrics

    def _update(self) -> None:
        """Give the running totals since the first step's end to the ``Throughput`` window."""
        if self._throughput is None:
            self._throughput = self._new_throughput()
        steps = self.steps - 1
        # `Throughput` wants totals that grow: without sample counts, a step counts as one sample (not logged).
        samples = max(self._samples, steps)
        counts: dict[str, Any] = {"time": time.perf_counter() - self._start, "batches": steps, "samples": samples}
        if self._tokens:
            counts["lengths"] = max(self._tokens, samples)
        if self.flops_per_step is not None:
            counts["flops"] = int(self.flops_per_step * (steps - self._last_steps))  # done since the last update
        self._last_steps = steps
        self._throughput.update(**counts)

    def _new_throughput(self) -> Any:
        """A ``Throughput`` with a first entry at the clock's start (nothing counted yet)."""
        from fabric_core.utilities._throughput import Throughput, compute_dtype, get_available_flops

        fabric = self._fabric
        world_size = int(getattr(fabric, "world_size", 1)) if fabric is not None else 1
        available = self.available_flops
        if available is None and fabric is not None:
            available = get_available_flops(fabric.device, compute_dtype(fabric.strategy.precision))
        # Rates come from a window's first and last entries: `window` intervals need `window + 1` entries.
        throughput = Throughput(available_flops=available, world_size=world_size, window_size=self.window + 1)
        first: dict[str, Any] = {"time": 0.0, "batches": 0, "samples": 0}
        if self._tokens:
            first["lengths"] = 0
        if self.flops_per_step is not None:
            first["flops"] = 0
        throughput.update(**first)
        self._last_steps = 0
        return throughput


def _check_count(arg: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfigError(
            f"`ThroughputMonitor({arg}={value!r})`: expected an integer >= 1.", argument=arg, value=value
        )


def _check_positive(arg: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        raise InvalidConfigError(
            f"`ThroughputMonitor({arg}={value!r})`: expected a finite number > 0.", argument=arg, value=value
        )
