"""Named callbacks: the built-in throughput monitor selected by name next to a plain callback object."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fabric_core import Fabric, spec
from fabric_core.callbacks import ThroughputMonitor
from fabric_core.errors import InvalidConfigError
from fabric_core.testing import RecordingLogger, make_manager


class Counter:
    def __init__(self) -> None:
        self.steps = 0

    def on_after_optimizer_step(self, strategy: Any, optimizer: Any) -> None:
        self.steps += 1


def test_throughput_by_name_logs_rates_through_the_loggers() -> None:
    recorder, counter = RecordingLogger(), Counter()
    fabric = Fabric(
        accelerator="cpu",
        callbacks=[spec("throughput", log_every_n_steps=3, batch_size=8), counter],
        loggers=recorder,
        plugin_manager=make_manager(),
    )
    monitor = fabric._callbacks[0]
    assert isinstance(monitor, ThroughputMonitor)
    model = torch.nn.Linear(4, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(6):
        fabric.backward(model(torch.randn(8, 4)).sum())
        optimizer.step()
        optimizer.zero_grad()
    assert counter.steps == 6 == monitor.steps  # the plain object and the named one both saw every step
    assert [step for step, _ in recorder.rows] == [3, 6]
    for _, metrics in recorder.rows:
        assert metrics["throughput/steps_per_sec"] > 0
        assert metrics["throughput/samples_per_sec"] == pytest.approx(8 * metrics["throughput/steps_per_sec"])


def test_throughput_rejects_bad_settings() -> None:
    with pytest.raises(InvalidConfigError, match=r"log_every_n_steps=0"):
        ThroughputMonitor(log_every_n_steps=0)
    assert ThroughputMonitor().compute() == {}


class MetricsSeen:
    """A callback that records the ``on_log`` events it gets (only the metrics: it takes no ``step``)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_log(self, metrics: dict[str, Any]) -> None:
        self.seen.append(dict(metrics))


class LitListener(torch.nn.Linear):
    """A LightningModule-shaped module (it has ``_fabric``) that listens to ``on_log`` once set up."""

    _fabric: Any = None

    def __init__(self) -> None:
        super().__init__(2, 1)
        self.seen: list[tuple[dict[str, Any], int | None]] = []

    def on_log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.seen.append((dict(metrics), step))


def test_on_log_reaches_every_callback_and_a_module_that_joins_after_the_first_log() -> None:
    early = MetricsSeen()
    fabric = Fabric(accelerator="cpu", callbacks=[early, object()], plugin_manager=make_manager())
    fabric.log("a", torch.tensor(1.0))
    fabric.log_dict({"b": 2}, step=7)
    lit = LitListener()
    fabric.setup(lit)  # a LightningModule becomes a callback here, after on_log's listeners were looked up
    fabric.log("c", 3.0, step=8)
    assert early.seen == [{"a": 1.0}, {"b": 2}, {"c": 3.0}]
    assert lit.seen == [({"c": 3.0}, 8)]
