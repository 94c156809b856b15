"""Throughput and model-FLOPs utilization (MFU) over a rolling window, under Lightning's names.

:class:`Throughput` turns running totals (elapsed time, batches, samples, item lengths, FLOPs) into
per-second rates; :class:`ThroughputMonitor` does the same for a :class:`~fabric_core.Fabric` run and logs
the result through ``fabric.log_dict`` on rank 0. :func:`measure_flops` counts a model's FLOPs with
PyTorch's ``FlopCounterMode``, and :func:`get_available_flops` looks up a device's peak FLOPs, the
denominator of MFU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabric_core.utilities._throughput import Throughput, _Metrics, get_available_flops, measure_flops
from fabric_core.utilities._throughput import compute_dtype as _compute_dtype
from fabric_core.utilities.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from fabric_core.fabric import Fabric

__all__ = ["Throughput", "ThroughputMonitor", "get_available_flops", "measure_flops"]


class ThroughputMonitor(Throughput):
    """A :class:`Throughput` for a Fabric run: world size and peak FLOPs from ``fabric``, logging on rank 0.

    ``update``, ``compute``, ``compute_and_log`` and ``reset`` do their work on global rank 0 only; on the
    other ranks they do nothing (``compute`` returns ``{}``).

    Example::

        monitor = ThroughputMonitor(fabric, window_size=10)
        for i, batch in enumerate(loader, 1):
            train_step(batch)
            monitor.update(time=time.perf_counter() - start, batches=i, samples=i * batch_size)
            if i % 10 == 0:
                monitor.compute_and_log(step=i)

    Args:
        fabric: The launched :class:`~fabric_core.Fabric`.
        **kwargs: ``window_size`` and ``separator`` of :class:`Throughput`.
    """

    def __init__(self, fabric: Fabric, **kwargs: Any) -> None:
        fabric._validate_launched()  # before launch, the world size is not known yet
        dtype = _compute_dtype(fabric.strategy.precision)
        available_flops = get_available_flops(fabric.device, dtype)
        super().__init__(available_flops=available_flops, world_size=fabric.world_size, **kwargs)
        self._fabric = fabric
        self.step = -1
        self.update = rank_zero_only(self.update)  # type: ignore[method-assign]
        self.compute = rank_zero_only(self.compute, default={})  # type: ignore[method-assign]
        self.compute_and_log = rank_zero_only(self.compute_and_log, default={})  # type: ignore[method-assign]
        self.reset = rank_zero_only(self.reset)  # type: ignore[method-assign]

    def compute_and_log(self, step: int | None = None, **kwargs: Any) -> _Metrics:
        """Compute the metrics and log them with ``fabric.log_dict``.

        Args:
            step: The step to log at; by default one more than the previous call's.
            **kwargs: Passed to :meth:`compute`.

        Returns:
            The metrics that were logged.
        """
        self.step = self.step + 1 if step is None else step
        metrics = self.compute(**kwargs)
        self._fabric.log_dict(metrics=metrics, step=self.step)
        return metrics
