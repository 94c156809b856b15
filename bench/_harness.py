"""Interleaved rounds, paired ratios, and the result records every row group returns.

Each row compares a few *variants* (raw PyTorch, fabric-core, Lightning Fabric, Accelerate) on one task.
In every round each variant is measured once, in a freshly shuffled order, and its value is divided by the
raw variant's value from the *same* round: machine-wide slowdowns (other processes on a shared machine)
hit both sides of a ratio alike and mostly cancel. A second raw variant (``raw (A/A)``) is measured exactly
like the first; its ratio to raw shows how far two identical measurements drift apart, the noise floor
against which every other ratio is read.
"""

from __future__ import annotations

import dataclasses
import gc
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

__all__ = [
    "AA",
    "ACCELERATE",
    "CORE",
    "LIGHTNING",
    "RAW",
    "Goal",
    "Measure",
    "RowResult",
    "Spread",
    "fastest_of",
    "interleave",
    "robust_mean",
    "row_result",
    "time_block",
]

RAW: Final = "raw"
AA: Final = "raw (A/A)"
CORE: Final = "fabric-core"
LIGHTNING: Final = "lightning"
ACCELERATE: Final = "accelerate"

#: ``time``: lower is better, ratio = variant / raw. ``rate``: higher is better, ratio = raw time / variant
#: time (the ratio of steps per second). ``memory``: lower is better, ratio = variant / raw.
Metric = Literal["time", "rate", "memory"]
#: One measurement of a variant in one round: seconds per operation (or bytes for ``memory`` rows).
Measure = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Goal:
    """What fabric-core's median ratio must reach: ``ratio <= value`` or ``ratio >= value``."""

    op: Literal["<=", ">="]
    value: float

    def met(self, ratio: float) -> bool:
        return ratio <= self.value if self.op == "<=" else ratio >= self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


@dataclasses.dataclass(frozen=True)
class Spread:
    """Median, min and max of a list of samples (kept too, for the JSON)."""

    median: float
    min: float
    max: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        return cls(statistics.median(samples), min(samples), max(samples), tuple(samples))

    def as_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "max": self.max, "samples": list(self.samples)}

    def fmt(self, digits: int = 2) -> str:
        return f"{self.median:.{digits}f} [{self.min:.{digits}f}, {self.max:.{digits}f}]"


@dataclasses.dataclass
class RowResult:
    """One row of the table: ratios to raw PyTorch per variant, and the absolute values behind them.

    Attributes:
        key: Stable identifier (``steps_mlp_fp32``), what ``--rows`` selects.
        title: What the row measures, for the table.
        metric: How the ratio is formed (see ``Metric``).
        unit: Unit of ``absolute`` (``s`` per operation, ``MiB``).
        goal: fabric-core's target ratio, if it has one.
        ratios: Spread of the per-round ratio, per variant (``raw`` itself is left out).
        absolute: Spread of the raw values, per variant (``raw`` included).
        labels: Per variant, what exactly ran when that is not obvious (``accelerate --help``).
        note: Anything a reader needs to interpret the row (a skipped variant and why).
        rounds: How many interleaved rounds were measured.
        extra: Further data for the JSON only (e.g. wall times where the ratio uses CPU times).
    """

    key: str
    title: str
    metric: Metric
    unit: str
    goal: Goal | None
    ratios: dict[str, Spread]
    absolute: dict[str, Spread]
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    note: str = ""
    rounds: int = 0
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def core_ratio(self) -> Spread | None:
        return self.ratios.get(CORE)

    @property
    def passed(self) -> bool | None:
        ratio = self.core_ratio
        if self.goal is None or ratio is None:
            return None
        return self.goal.met(ratio.median)

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "metric": self.metric,
            "unit": self.unit,
            "goal": None if self.goal is None else {"op": self.goal.op, "value": self.goal.value},
            "passed": self.passed,
            "rounds": self.rounds,
            "ratios": {k: v.as_dict() for k, v in self.ratios.items()},
            "absolute": {k: v.as_dict() for k, v in self.absolute.items()},
            "labels": self.labels,
            "note": self.note,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RowResult:
        """Rebuild a row from :meth:`as_dict` (rows measured in another process)."""

        def spreads(raw: dict[str, Any]) -> dict[str, Spread]:
            return {k: Spread(v["median"], v["min"], v["max"], tuple(v.get("samples", ()))) for k, v in raw.items()}

        goal = data.get("goal")
        return cls(
            key=data["key"],
            title=data["title"],
            metric=data["metric"],
            unit=data.get("unit", "s"),
            goal=None if goal is None else Goal(goal["op"], float(goal["value"])),
            ratios=spreads(data.get("ratios", {})),
            absolute=spreads(data.get("absolute", {})),
            labels=dict(data.get("labels", {})),
            note=data.get("note", ""),
            rounds=int(data.get("rounds", 0)),
            extra=dict(data.get("extra", {})),
        )


def robust_mean(samples: Sequence[float]) -> float:
    """Mean of the middle half of ``samples`` (the interquartile mean).

    On a shared machine a call is now and then descheduled for a whole time slice; that says nothing about
    the code under test and would dominate a plain mean. Dropping the slowest and fastest quarter removes
    those spikes while still averaging many calls, unlike a single minimum.
    """
    ordered = sorted(samples)
    cut = len(ordered) // 4
    middle = ordered[cut : len(ordered) - cut] or ordered
    return sum(middle) / len(middle)


def time_block(function: Callable[[], Any], repeat: int, before: Callable[[], Any] | None = None) -> float:
    """Seconds per call of ``function``: each of ``repeat`` back-to-back calls timed, then :func:`robust_mean`.

    Args:
        function: What to time.
        repeat: How many calls.
        before: Run once before the calls, untimed (e.g. a barrier that lines up the processes).
    """
    gc.disable()
    clock = time.perf_counter
    times = [0.0] * repeat
    try:
        if before is not None:
            before()
        for index in range(repeat):
            start = clock()
            function()
            times[index] = clock() - start
    finally:
        gc.enable()
    return robust_mean(times)


def fastest_of(measure: Measure, repeat: int) -> Measure:
    """A measure whose value is the smallest of ``repeat`` back-to-back calls of ``measure``.

    For operations of a second or more that share a disk and two cores with other jobs (checkpoint saves),
    one call can take several times another for reasons outside the code; interference only ever adds
    time, so the fastest of a few calls is the stable estimate of what the code costs.
    """

    def best() -> float:
        return min(measure() for _ in range(repeat))

    return best


def _balanced_orders(count: int) -> list[list[int]]:
    """A Williams design: orders of ``count`` items in which each item takes every position equally often
    and follows every other item equally often (first-order carry-over balanced)."""
    first = [0]
    low, high = 1, count - 1
    while len(first) < count:
        first.append(low if len(first) % 2 else high)
        if len(first) % 2:
            high -= 1
        else:
            low += 1
    orders = [[(item + shift) % count for item in first] for shift in range(count)]
    if count % 2:
        orders += [order[::-1] for order in orders]
    return orders


def interleave(measures: dict[str, Measure], rounds: int, seed: int = 0, warmup: int = 1) -> dict[str, list[float]]:
    """Measure every variant once per round; across rounds, orders from a balanced design.

    A plain shuffle per round leaves position effects in (the variant measured after the biggest one
    runs on its cold caches; the first after a barrier wakes the other process): with a few dozen rounds
    they do not average out, and with a fixed seed they come back in every run. The orders here put each
    variant in each position, and after each other variant, equally often; the seed maps variants to the
    design's slots and shuffles the order of its rows.

    Args:
        measures: ``{variant: measure}``. Where it has :data:`RAW` but no :data:`AA`, an A/A twin of the raw
            measure is added.
        rounds: Rounds that count.
        seed: Seeds the order (so that two processes running the same rows agree on it).
        warmup: Rounds run first and thrown away (imports, allocator, caches, branch predictors).

    Returns:
        ``{variant: [value per round]}``.
    """
    measures = {**measures, AA: measures[RAW]} if RAW in measures and AA not in measures else dict(measures)
    names = list(measures)
    rng = random.Random(seed)
    rng.shuffle(names)
    design = _balanced_orders(len(names))
    rng.shuffle(design)
    # A full collection with torch loaded takes hundreds of milliseconds: do it once, then move every
    # surviving object out of the collector's sight, so that the cheap young collections between blocks
    # are all that runs (time_block holds the collector off inside a block).
    gc.collect()
    gc.freeze()
    values: dict[str, list[float]] = {name: [] for name in names}
    for index in range(warmup + rounds):
        # Warm-up rounds take the design's last rows, so that the counted rounds start at its first.
        for name in (names[slot] for slot in design[(index - warmup) % len(design)]):
            value = measures[name]()
            if index >= warmup:
                values[name].append(value)
    return values


def row_result(
    key: str,
    title: str,
    values: dict[str, list[float]],
    *,
    metric: Metric = "time",
    unit: str = "s",
    goal: Goal | None = None,
    labels: dict[str, str] | None = None,
    note: str = "",
) -> RowResult:
    """Turn per-round values into paired per-round ratios to raw, with median, min and max.

    Args:
        key: Row identifier.
        title: Row title.
        values: What :func:`interleave` returned (same rounds for every variant).
        metric: ``time``/``memory`` (ratio = variant / raw) or ``rate`` (ratio = raw / variant).
        unit: Unit of the absolute values.
        goal: fabric-core's target.
        labels: What each variant ran, when the title does not say it.
        note: Free text for the report.
    """
    raw = values[RAW]
    ratios: dict[str, Spread] = {}
    for name, samples in values.items():
        if name == RAW:
            continue
        # A rate row compares steps per second, the inverse of the seconds per step measured.
        pairs = zip(raw, samples)
        per_round = [r / v for r, v in pairs] if metric == "rate" else [v / r for r, v in pairs]
        ratios[name] = Spread.of(per_round)
    return RowResult(
        key=key,
        title=title,
        metric=metric,
        unit=unit,
        goal=goal,
        ratios=ratios,
        absolute={name: Spread.of(samples) for name, samples in values.items()},
        labels=dict(labels or {}),
        note=note,
        rounds=len(raw),
    )
