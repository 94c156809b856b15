"""Throughput, ThroughputMonitor, measure_flops and get_available_flops, compared with Lightning Fabric's."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import pytest
import torch

from fabric_core import Fabric
from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.throughput import (
    Throughput,
    ThroughputMonitor,
    _compute_dtype,
    get_available_flops,
    measure_flops,
)

lightning_throughput = pytest.importorskip("lightning_fabric.utilities.throughput")

# Running totals of a scripted loop: uneven step times, batch sizes and lengths, varying FLOPs per update.
_STEPS: list[dict[str, Any]] = []
_t, _samples, _lengths = 0.0, 0, 0
for _i in range(1, 13):
    _t += 0.25 + 0.125 * (_i % 3)
    _samples += 4 + _i % 2
    _lengths += 4 * 7 + _i
    _STEPS.append({"time": _t, "batches": _i, "samples": _samples, "lengths": _lengths, "flops": 1000 + 10 * _i})


@pytest.mark.parametrize(
    ("kwargs", "fields"),
    [
        ({"window_size": 4}, ("time", "batches", "samples")),
        ({"window_size": 5, "world_size": 3}, ("time", "batches", "samples", "lengths")),
        ({"window_size": 3, "world_size": 2, "available_flops": 5e4}, ("time", "batches", "samples", "flops")),
        ({"window_size": 6, "world_size": 1, "available_flops": 1e5, "separator": "|"}, tuple(_STEPS[0])),
        ({"window_size": 2, "world_size": 4}, tuple(_STEPS[0])),
    ],
)
def test_compute_matches_lightning_after_every_update(kwargs: dict[str, Any], fields: tuple[str, ...]) -> None:
    ours, theirs = Throughput(**kwargs), lightning_throughput.Throughput(**kwargs)
    seen_rates = False
    for step in _STEPS:
        update = {k: step[k] for k in fields}
        ours.update(**update)
        theirs.update(**update)
        expected = theirs.compute()
        assert ours.compute() == pytest.approx(expected, rel=1e-12)
        assert set(ours.compute()) == set(expected)
        seen_rates = seen_rates or any(key.endswith("_per_sec") for key in expected)
    assert seen_rates  # the window filled, so the rates were compared too
    ours.reset()
    theirs.reset()
    ours.update(**{k: _STEPS[0][k] for k in fields})
    theirs.update(**{k: _STEPS[0][k] for k in fields})
    assert ours.compute() == pytest.approx(theirs.compute())


def test_mfu_is_device_flops_over_available() -> None:
    throughput = Throughput(available_flops=100.0, world_size=2, window_size=2)
    throughput.update(time=1.0, batches=1, samples=1, flops=10)
    throughput.update(time=2.0, batches=2, samples=2, flops=30)
    metrics = throughput.compute()
    assert metrics["flops_per_sec"] == 60.0  # the second update's flops on both devices, over 1 s
    assert metrics["device/flops_per_sec"] == 30.0
    assert metrics["device/mfu"] == 0.3


@pytest.mark.parametrize(
    "update",
    [
        {"time": 1.0, "batches": 1, "samples": 1},  # time does not grow
        {"time": 3.0, "batches": 3, "samples": 2},  # fewer samples than batches
        {"time": 3.0, "batches": 3, "samples": 3, "lengths": 2},  # fewer lengths than samples
    ],
)
def test_bad_updates_raise_value_error_like_lightning(update: dict[str, Any]) -> None:
    ours, theirs = Throughput(), lightning_throughput.Throughput()
    for t in (ours, theirs):
        t.update(time=1.0, batches=1, samples=1)
    with pytest.raises(ValueError):
        theirs.update(**update)
    with pytest.raises(ValueError, match="Expected"):
        ours.update(**update)


def test_lengths_in_some_updates_only_is_a_runtime_error() -> None:
    throughput = Throughput()
    throughput.update(time=1.0, batches=1, samples=1)
    with pytest.raises(RuntimeError, match="same number of samples"):
        throughput.update(time=2.0, batches=2, samples=2, lengths=2)


@pytest.mark.parametrize(("argument", "value"), [("window_size", 1), ("world_size", 0), ("window_size", 2.5)])
def test_bad_construction_names_the_argument(argument: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError, match=argument):
        Throughput(**{argument: value})


def test_compute_before_update_says_so() -> None:
    with pytest.raises(RuntimeError, match="before any update"):
        Throughput().compute()


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


@pytest.mark.parametrize("on_meta", [False, True])
def test_measure_flops_matches_lightning(on_meta: bool) -> None:
    with torch.device("meta" if on_meta else "cpu"):
        model = _Net()
        x = torch.randn(5, 32)
    forward = measure_flops(model, lambda: model(x))
    training = measure_flops(model, lambda: model(x), lambda y: y.sum())
    assert forward == lightning_throughput.measure_flops(model, lambda: model(x))
    assert training == lightning_throughput.measure_flops(model, lambda: model(x), lambda y: y.sum())
    assert forward == 2 * 5 * (32 * 64 + 64 * 8)  # two FLOPs per multiply-add of the two matmuls
    assert training > forward


def test_available_flops_of_cpu_is_unknown() -> None:
    assert get_available_flops(torch.device("cpu"), torch.float32) is None
    assert lightning_throughput.get_available_flops(torch.device("cpu"), torch.float32) is None


@pytest.mark.parametrize(
    ("name", "capability", "dtype"),
    [
        ("NVIDIA H100 80GB HBM3", (9, 0), torch.bfloat16),
        ("NVIDIA H100 PCIe", (9, 0), torch.float32),
        # H200, H100 NVL, A40 and RTX A6000 differ on purpose: dense figures (tests/fabric/test_observing.py).
        ("NVIDIA A100-SXM4-40GB", (8, 0), torch.float32),
        ("NVIDIA GeForce RTX 3090 Ti", (8, 6), "int4"),
        ("NVIDIA GeForce RTX 4080 SUPER", (8, 9), torch.bfloat16),
        ("NVIDIA L4", (8, 9), torch.int8),
        ("Tesla T4", (7, 5), torch.float16),
        ("Tesla V100-SXM2-16GB", (7, 0), torch.float64),
        ("Tesla T4", (7, 5), torch.bfloat16),  # not supported: None with a warning
        ("Some Future GPU", (10, 0), torch.float32),  # unknown: None with a warning
    ],
)
def test_available_flops_table_matches_lightning(
    monkeypatch: pytest.MonkeyPatch, name: str, capability: tuple[int, int], dtype: Any
) -> None:
    # No GPU here: stand in for the two queries the lookup makes of the driver.
    import lightning_fabric.accelerators.cuda as lightning_cuda

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(lightning_cuda, "_is_ampere_or_later", lambda device=None: capability[0] >= 8)
    device = torch.device("cuda", 0)
    unknown = name.startswith("Some") or (dtype is torch.bfloat16 and "T4" in name)
    with pytest.warns(UserWarning) if unknown else contextlib.nullcontext():
        ours = get_available_flops(device, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = lightning_throughput.get_available_flops(device, dtype)
    assert ours == expected
    if not unknown:
        assert isinstance(ours, int) and ours > 10**12


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        ("32-true", torch.float32),
        ("64-true", torch.float64),
        ("bf16-mixed", torch.bfloat16),
        ("16-true", torch.float16),
    ],
)
def test_compute_dtype_of_precision(precision: str, dtype: torch.dtype) -> None:
    fabric = Fabric(accelerator="cpu", devices=1, precision=precision)  # type: ignore[arg-type]
    assert _compute_dtype(fabric.strategy.precision) is dtype


def test_monitor_logs_through_fabric(tmp_path: Any) -> None:
    from fabric_core.loggers.csv_logs import CSVLogger

    logger = CSVLogger(tmp_path)
    fabric = Fabric(accelerator="cpu", devices=1, loggers=logger)
    monitor = ThroughputMonitor(fabric, window_size=2)
    assert monitor.world_size == 1 and monitor.available_flops is None
    monitor.update(time=1.0, batches=1, samples=4)
    monitor.update(time=1.5, batches=2, samples=8)
    metrics = monitor.compute_and_log()
    assert metrics == {
        "time": 1.5,
        "batches": 2,
        "samples": 8,
        "device/batches_per_sec": 2.0,
        "device/samples_per_sec": 8.0,
    }
    assert monitor.step == 0
    assert monitor.compute_and_log(step=7) == metrics and monitor.step == 7
    logger.finalize("success")
    rows = (tmp_path / "lightning_logs").rglob("metrics.csv")
    text = next(rows).read_text()
    assert "device/samples_per_sec" in text and "8.0" in text


def test_monitor_is_silent_off_rank_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from fabric_core.utilities.rank_zero import rank_zero_only

    fabric = Fabric(accelerator="cpu", devices=1)
    monitor = ThroughputMonitor(fabric, window_size=2)
    monkeypatch.setattr(rank_zero_only, "_rank", 1)
    monitor.update(time=1.0, batches=1, samples=1)
    assert monitor.compute() == {}
    monkeypatch.setattr(rank_zero_only, "_rank", 0)
    with pytest.raises(RuntimeError, match="before any update"):
        monitor.compute()  # rank 1's update did nothing
