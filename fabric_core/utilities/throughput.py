"""Throughput and model-FLOPs utilization (MFU) over a rolling window, under Lightning's names.

:class:`Throughput` turns running totals (elapsed time, batches, samples, item lengths, FLOPs) into
per-second rates; :class:`ThroughputMonitor` does the same for a :class:`~fabric_core.Fabric` run and logs
the result through ``fabric.log_dict`` on rank 0. :func:`measure_flops` counts a model's FLOPs with
PyTorch's ``FlopCounterMode``, and :func:`get_available_flops` looks up a device's peak FLOPs, the
denominator of MFU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import torch

from fabric_core._deferred import lightning_reexports
from fabric_core.utilities._throughput import (
    _PEAK,
    _PEAK_COLUMNS,
    _TPU_PEAK,
    Throughput,
    _IncreasingWindow,
    _Metrics,
    get_available_flops,
    measure_flops,
)
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


# -- Lightning's private names: views of the peak-FLOPs table and the window behind ``Throughput`` -----------

_THROUGHPUT_METRICS = _Metrics
#: Peak dense FLOPs per second by CUDA chip and compute dtype (``torch.bfloat16``, ``"tfloat32"``, ...), from the
#: table :func:`get_available_flops` reads; a dtype the chip lacks is absent.
_CUDA_FLOPS: dict[str, dict[str | torch.dtype, float]] = {
    chip: {dtype: peak for dtype, peak in zip(_PEAK_COLUMNS, row, strict=True) if peak is not None}  # type: ignore[misc]
    for chip, row in _PEAK.items()
}
#: Peak FLOPs per second by TPU generation (``"v4"``), whatever the precision.
_TPU_FLOPS: dict[str, float] = dict(_TPU_PEAK)


def _plugin_to_compute_dtype(plugin: Any) -> torch.dtype:
    """The dtype the matrix multiplications of a precision run in (what :class:`ThroughputMonitor` looks up).

    Raises:
        RuntimeError: ``plugin`` is not a precision.
    """
    from fabric_core.precision.precision import Precision

    if not isinstance(plugin, Precision):
        raise RuntimeError(f"Expected a precision plugin, got {plugin}")
    return _compute_dtype(plugin)


T = TypeVar("T", bound=float)


class _MonotonicWindow(_IncreasingWindow[T]):
    """The last ``maxlen`` values appended; each must be larger than the one before (``ValueError`` if not).

    Only appending is supported: assigning an item raises ``NotImplementedError``.

    Args:
        maxlen: How many values are kept; the oldest is dropped first.
    """

    def __init__(self, maxlen: int) -> None:
        super().__init__(maxlen, "value")

    @property
    def last(self) -> T | None:
        """The value appended last, ``None`` while empty."""
        return self[-1] if self else None

    def __setitem__(self, key: Any, value: Any) -> None:
        raise NotImplementedError("__setitem__ is not supported")


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
