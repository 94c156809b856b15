"""Reducing logged values across processes and over a window of steps (``fabric.log(..., reduce="mean")``).

``fabric.log_dict`` hands its values here only when the call asks for a reduction or a window, so a plain
``fabric.log_dict(metrics)`` does no extra work. A window keeps each name's values on this process and, once
it holds ``every_n_steps`` of them, reduces them locally and then across processes with one collective for
all the names that are due together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

import torch
from torch import Tensor

from fabric_core.errors import InvalidConfigError

__all__ = ["REDUCE_CHOICES", "MetricAggregator", "reduce_metrics"]

#: The reductions ``fabric.log`` / ``fabric.log_dict`` accept for ``reduce=``.
REDUCE_CHOICES: Final = ("mean", "sum", "max", "min")

_LOCAL: Final[dict[str, Callable[[list[float]], float]]] = {
    "mean": lambda values: math.fsum(values) / len(values),
    "sum": math.fsum,
    "max": max,
    "min": min,
}


class _Window:
    """The values one name collected since its last flush, with the settings they were logged with."""

    __slots__ = ("every_n_steps", "reduce", "values")

    def __init__(self, reduce: str | None, every_n_steps: int) -> None:
        self.reduce = reduce
        self.every_n_steps = every_n_steps
        self.values: list[float] = []


class MetricAggregator:
    """Reduce logged values across processes and, with a window, over steps; ``Fabric`` holds one.

    Args:
        all_reduce: ``(tensor, reduce_op) -> tensor``: the strategy's collective (identity on one process).
        device: Where the tensor handed to ``all_reduce`` lives (the process's device, as NCCL needs).
    """

    def __init__(self, all_reduce: Callable[[Tensor, str], Tensor], device: torch.device) -> None:
        self._all_reduce = all_reduce
        self._device = device
        # MPS has no float64; elsewhere float64 keeps sums of many steps exact enough.
        self._dtype = torch.float32 if device.type == "mps" else torch.float64
        self._windows: dict[str, _Window] = {}

    def __call__(self, metrics: Mapping[str, Any], reduce: str | None, every_n_steps: int | None) -> dict[str, float]:
        """The values to log now: all of them reduced, or (with a window) those whose window is full.

        Every process must make the same calls: a reduction is a collective.

        Raises:
            InvalidConfigError: ``reduce`` is not one of :data:`REDUCE_CHOICES`, ``every_n_steps`` is not an
                integer >= 1, or a name's window is continued with other settings (also a ``ValueError``).
            ValueError: A value is not a number or a one-element tensor (the message names it).
        """
        check_reduce_options(reduce, every_n_steps)
        values = {name: _scalar(name, value) for name, value in metrics.items()}
        if every_n_steps is None:
            return self._reduce({name: (reduce, value) for name, value in values.items()})
        due: dict[str, tuple[str | None, float]] = {}
        for name, value in values.items():
            window = self._windows.get(name)
            if window is None:
                window = self._windows[name] = _Window(reduce, every_n_steps)
            elif (window.reduce, window.every_n_steps) != (reduce, every_n_steps):
                raise InvalidConfigError(
                    f"`fabric.log_dict`: {name!r} is being accumulated with reduce={window.reduce!r}, "
                    f"every_n_steps={window.every_n_steps}; this call asks for reduce={reduce!r}, "
                    f"every_n_steps={every_n_steps}. Keep one setting per name.",
                    argument="reduce",
                    value=reduce,
                )
            window.values.append(value)
            if len(window.values) >= every_n_steps:
                del self._windows[name]
                # The window's own reduction first (the mean of a window for reduce=None), ranks next.
                due[name] = (reduce, _LOCAL[reduce or "mean"](window.values))
        return self._reduce(due)

    def _reduce(self, values: Mapping[str, tuple[str | None, float]]) -> dict[str, float]:
        """Reduce across processes: one collective per distinct reduction (one in practice)."""
        result = {name: value for name, (reduce, value) in values.items() if reduce is None}
        by_op: dict[str, list[str]] = {}
        for name, (reduce, _) in values.items():
            if reduce is not None:
                by_op.setdefault(reduce, []).append(name)
        for reduce, names in by_op.items():
            tensor = torch.tensor([values[name][1] for name in names], dtype=self._dtype, device=self._device)
            reduced = self._all_reduce(tensor, reduce).tolist()
            result.update(zip(names, reduced, strict=True))
        return {name: result[name] for name in values}  # the caller's order


def reduce_metrics(
    fabric: Any, metrics: Mapping[str, Any], reduce: str | None, every_n_steps: int | None
) -> dict[str, float]:
    """``fabric.log_dict(..., reduce=..., every_n_steps=...)``: the values to log now, through ``fabric``'s aggregator.

    The aggregator is made at the first such call, so that plain logging never pays for it.
    """
    aggregator: MetricAggregator | None = vars(fabric).get("_metric_aggregator")
    if aggregator is None:
        strategy = fabric.strategy
        aggregator = MetricAggregator(lambda tensor, op: strategy.all_reduce(tensor, reduce_op=op), fabric.device)
        fabric._metric_aggregator = aggregator
    return aggregator(metrics, reduce, every_n_steps)


def check_reduce_options(reduce: Any, every_n_steps: Any) -> None:
    """Refuse an unknown ``reduce`` or a bad ``every_n_steps`` before any value is kept or reduced.

    Raises:
        InvalidConfigError: Naming the value and the choices (also a ``ValueError``).
    """
    if reduce is not None and reduce not in REDUCE_CHOICES:
        raise InvalidConfigError(
            f"`fabric.log(reduce={reduce!r})`: not a reduction. Choose one of "
            f"{', '.join(repr(c) for c in REDUCE_CHOICES)}, or None to log this process's value as it is.",
            argument="reduce",
            value=reduce,
        )
    if every_n_steps is not None and (
        isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1
    ):
        raise InvalidConfigError(
            f"`fabric.log(every_n_steps={every_n_steps!r})`: expected an integer >= 1, or None to log every call.",
            argument="every_n_steps",
            value=every_n_steps,
        )


def _scalar(name: str, value: Any) -> float:
    """``value`` as one float, or a ``ValueError`` that names the metric."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"`fabric.log_dict`: the value of {name!r} is a tensor of shape {tuple(value.shape)}; a reduced "
                "metric must be one number (a 0-d or one-element tensor). Reduce it yourself first, e.g. `.mean()`."
            )
        return float(value.item())
    if isinstance(value, (int, float)) or hasattr(value, "__float__"):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise ValueError(
        f"`fabric.log_dict`: the value of {name!r} is {type(value).__name__} {value!r}; a reduced metric must be "
        "a number or a one-element tensor."
    )
