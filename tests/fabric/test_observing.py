"""Observing a run: the profiler callback and ``fabric.profile``, throughput and MFU in a CSV logger, and
``fabric.log`` values reduced across processes and over a window of steps.

The 2-process job (``tests/_jobs/observe_job.py`` under ``fabric-core run``, gloo on 127.0.0.1) is run once for
the profiler's per-rank traces and the reduced metrics.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core import Fabric, spec
from fabric_core.callbacks import Profiler
from fabric_core.errors import InvalidConfigError
from fabric_core.loggers import CSVLogger
from fabric_core.testing import RecordingLogger, run_in_own_session
from fabric_core.utilities.throughput import measure_flops

JOBS = Path(__file__).parents[1] / "_jobs"


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def _train(fabric: Fabric, steps: int, each_step: Any = None) -> None:
    torch.manual_seed(0)
    model, optimizer = fabric.setup(_mlp(), torch.optim.SGD(_mlp().parameters(), lr=0.01))
    x = torch.randn(16, 32)
    for step in range(1, steps + 1):
        if each_step is not None:
            each_step(step)
        fabric.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()


def _trace_names(path: Path) -> set[str]:
    events = json.loads(path.read_text())["traceEvents"]
    return {str(event.get("name")) for event in events}


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


# -- the profiler ------------------------------------------------------------------------------------------
def test_profiler_callback_writes_a_trace_into_the_logger_folder(tmp_path: Path, capsys: Any) -> None:
    logger = CSVLogger(tmp_path)
    fabric = Fabric(accelerator="cpu", loggers=logger, callbacks=[spec("profiler", wait=1, warmup=1, active=2)])
    profiler = fabric._callbacks[0]
    assert isinstance(profiler, Profiler)
    _train(fabric, steps=6, each_step=lambda step: fabric.log("loss", float(step)))
    logger.save()
    traces = list(Path(logger.log_dir, "profiler").glob("*.pt.trace.json"))
    assert [t.name.split(".")[0] for t in traces] == ["rank0"]
    names = _trace_names(traces[0])
    # Real operator events from the active steps (2 and 3), none from the waiting step 0.
    assert {"aten::addmm", "aten::relu", "ProfilerStep#2", "ProfilerStep#3"} <= names
    assert "ProfilerStep#0" not in names
    assert profiler.steps == 4 and profiler._profiler is None  # stopped itself after the schedule's end
    fabric.setup(torch.nn.Linear(2, 2))  # another model: no second profile starts
    assert profiler._profiler is None
    out = capsys.readouterr().out
    assert "Self CPU time total" in out and "aten::addmm" in out
    # The traces do not make the CSV logger think its folder belonged to another run.
    assert [row["loss"] for row in _csv_rows(Path(logger.log_dir, "metrics.csv"))] == [
        str(float(i)) for i in range(1, 7)
    ]


def test_fabric_profile_context_manager_writes_to_dirpath_or_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fabric = Fabric(accelerator="cpu")
    model = torch.nn.Linear(8, 8)
    with fabric.profile(wait=0, warmup=1, active=1, row_limit=0) as profiler:
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            profiler.step()
    (trace,) = Path(tmp_path, "profiler").glob("rank0.*.pt.trace.json")  # no logger: ./profiler
    assert "aten::addmm" in _trace_names(trace)
    with fabric.profile(wait=0, warmup=1, active=1, dirpath=tmp_path / "mine", record_shapes=True) as profiler:
        profiler.step()  # the warm-up step
        model(torch.randn(4, 8))
    # Stopped in the middle of its active step: the block's end still writes the trace.
    (trace,) = Path(tmp_path, "mine").glob("rank0.*.pt.trace.json")
    assert "aten::addmm" in _trace_names(trace)
    assert profiler.summary is not None and "aten::addmm" in profiler.summary


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"active": 0}, "active=0"),
        ({"wait": -1}, "wait=-1"),
        ({"repeat": 1.5}, "repeat=1.5"),
        ({"activities": ["gpu"]}, "activities=['gpu']"),
        ({"activities": "cpu"}, "activities='cpu'"),
        ({"schedule": None}, "schedule"),
    ],
)
def test_profiler_refuses_bad_options_at_construction(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(named)) as info:
        Fabric(accelerator="cpu", callbacks=[spec("profiler", **options)])
    assert isinstance(info.value, ValueError)


# -- throughput and MFU ------------------------------------------------------------------------------------
def test_measure_flops_counts_the_mlp_training_step() -> None:
    with torch.device("meta"):
        model, x = _mlp(), torch.randn(16, 32)
    flops = measure_flops(model, lambda: model(x), lambda y: y.sum())
    forward = 2 * 16 * 32 * 64 + 2 * 16 * 64 * 8
    # Backward: both weight gradients, and the input gradient of the second layer only.
    assert flops == forward + (2 * 16 * 32 * 64 + 2 * 16 * 64 * 8) + 2 * 16 * 64 * 8 == 180224


def test_throughput_writes_rates_flops_and_mfu_to_the_csv_file(tmp_path: Path) -> None:
    with torch.device("meta"):
        meta, x = _mlp(), torch.randn(16, 32)
    flops = measure_flops(meta, lambda: meta(x), lambda y: y.sum())
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    options = {"log_every_n_steps": 5, "batch_size": 16, "tokens_per_sample": 10, "available_flops": 1e12}
    fabric = Fabric(accelerator="cpu", loggers=logger, callbacks=[spec("throughput", **options)])
    fabric.call("on_train_start", flops_per_step=flops)
    _train(fabric, steps=20)
    logger.save()
    rows = _csv_rows(Path(logger.log_dir, "metrics.csv"))
    assert [row["step"] for row in rows] == ["5", "10", "15", "20"]
    for row in rows:
        values = {key: float(value) for key, value in row.items()}
        steps_per_sec = values["throughput/steps_per_sec"]
        assert 1 < steps_per_sec < 1e6  # a tiny MLP on a CPU
        assert values["throughput/samples_per_sec"] == pytest.approx(16 * steps_per_sec, rel=1e-6)
        assert values["throughput/tokens_per_sec"] == pytest.approx(160 * steps_per_sec, rel=1e-6)
        assert values["throughput/flops_per_sec"] == pytest.approx(flops * steps_per_sec, rel=1e-6)
        assert values["throughput/device/flops_per_sec"] == values["throughput/flops_per_sec"]  # one process
        assert values["throughput/mfu"] == pytest.approx(values["throughput/flops_per_sec"] / 1e12, rel=1e-6)
        assert 0 < values["throughput/mfu"] < 1


def test_throughput_counts_reported_tokens_and_has_no_mfu_on_cpu_without_peak() -> None:
    recorder = RecordingLogger()
    fabric = Fabric(accelerator="cpu", loggers=recorder, callbacks=[spec("throughput", log_every_n_steps=2)])
    # 300 tokens on even steps, 100 on odd ones: 200 a step over any two consecutive steps.
    _train(fabric, 6, lambda step: fabric.call("on_train_batch_end", samples=2, tokens=100 + 200 * (step % 2 == 0)))
    assert [step for step, _ in recorder.rows] == [2, 4, 6]
    for step, metrics in recorder.rows[1:]:
        rate = metrics["throughput/steps_per_sec"]
        assert metrics["throughput/tokens_per_sec"] == pytest.approx(200 * rate, rel=1e-6), step
        assert metrics["throughput/samples_per_sec"] == pytest.approx(2 * rate, rel=1e-6)
    assert not any("mfu" in key or "flops" in key for _, metrics in recorder.rows for key in metrics)


@pytest.mark.parametrize(
    ("name", "dtype", "sparse_tflops"),
    [
        # Datasheet figures with 2:4 sparsity; the table holds half of them (dense).
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, 1979),
        ("NVIDIA H100 80GB HBM3", torch.int8, 3958),
        ("NVIDIA H100 PCIe", torch.float16, 1513),
        ("NVIDIA H100 NVL", torch.bfloat16, 1671),
        ("NVIDIA H200", torch.bfloat16, 1979),
        ("NVIDIA H200", torch.float32, 989),  # TF32 on Hopper
        ("NVIDIA H200 NVL", torch.float16, 1671),
        ("NVIDIA A100-SXM4-80GB", torch.bfloat16, 624),
        ("NVIDIA A100-SXM4-80GB", torch.float32, 312),  # TF32
        ("NVIDIA A40", torch.bfloat16, 299.4),
        ("NVIDIA RTX A6000", torch.float16, 309.7),
    ],
)
def test_peak_flops_are_dense(
    monkeypatch: pytest.MonkeyPatch, name: str, dtype: torch.dtype, sparse_tflops: float
) -> None:
    from fabric_core.utilities.throughput import get_available_flops

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0) if "H" in name else (8, 0))
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")  # float32 matmuls in TF32
    peak = get_available_flops(torch.device("cuda", 0), dtype)
    assert peak == pytest.approx(sparse_tflops / 2 * 1e12, rel=2e-3)


# -- reduced and windowed logging -------------------------------------------------------------------------
def test_bad_reduce_and_non_scalar_values_fail_at_once_naming_them() -> None:
    recorder = RecordingLogger()
    fabric = Fabric(accelerator="cpu", loggers=recorder)
    with pytest.raises(InvalidConfigError, match=r"reduce='avg'.*'mean', 'sum', 'max', 'min'") as info:
        fabric.log("loss", 1.0, reduce="avg")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ValueError, match=r"'acc' is a tensor of shape \(3,\)"):
        fabric.log_dict({"loss": 1.0, "acc": torch.ones(3)}, reduce="mean")
    with pytest.raises(ValueError, match=r"'name' is str 'x'"):
        fabric.log_dict({"name": "x"}, every_n_steps=2)
    with pytest.raises(InvalidConfigError, match=r"every_n_steps=0.*integer >= 1"):
        fabric.log("loss", 1.0, every_n_steps=0)
    fabric.log("loss", 1.0, reduce="sum", every_n_steps=2)
    with pytest.raises(InvalidConfigError, match=r"'loss' is being accumulated with reduce='sum'"):
        fabric.log("loss", 1.0, reduce="max", every_n_steps=2)
    assert recorder.rows == []


def test_plain_logging_never_reduces_and_a_window_reduces_once_per_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = RecordingLogger()
    fabric = Fabric(accelerator="cpu", loggers=recorder)
    calls: list[tuple[list[float], str]] = []
    monkeypatch.setattr(
        fabric.strategy, "all_reduce", lambda tensor, reduce_op: calls.append((tensor.tolist(), reduce_op)) or tensor
    )
    fabric.log_dict({"a": 1.0, "b": torch.tensor(2.0)}, step=0)
    assert calls == [] and "_metric_aggregator" not in vars(fabric)  # today's path: nothing made, nothing reduced
    for step in range(1, 7):
        fabric.log_dict({"a": float(step), "b": 10.0 * step, "c": -step}, step=step, reduce="max", every_n_steps=3)
        fabric.log("s", float(step), step=step, reduce="sum", every_n_steps=3)
        fabric.log("m", float(step), step=step, every_n_steps=2)  # no reduce: the window's mean on this process
    # One collective per flush of each call, holding all its names.
    assert calls == [([3.0, 30.0, -1.0], "max"), ([6.0], "sum"), ([6.0, 60.0, -4.0], "max"), ([15.0], "sum")]
    assert recorder.rows[0] == (0, {"a": 1.0, "b": 2.0})
    assert recorder.rows[1:] == [
        (2, {"m": 1.5}),
        (3, {"a": 3.0, "b": 30.0, "c": -1.0}),
        (3, {"s": 6.0}),
        (4, {"m": 3.5}),
        (6, {"a": 6.0, "b": 60.0, "c": -4.0}),
        (6, {"s": 15.0}),
        (6, {"m": 5.5}),
    ]


# -- two processes ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_process_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("observe")
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    command = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2"]
    result = run_in_own_session([*command, str(JOBS / "observe_job.py"), str(out)], timeout=100, env=env)
    assert result.returncode == 0, result.stdout[-3000:]
    return out / "run" / "version_0", result.stdout


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_write_one_trace_each_and_rank_zero_prints_the_table(two_process_job: tuple[Path, str]) -> None:
    log_dir, output = two_process_job
    traces = sorted(Path(log_dir, "profiler").glob("*.pt.trace.json"))
    assert [trace.name.split(".")[0] for trace in traces] == ["rank0", "rank1"]
    for trace in traces:
        assert "aten::addmm" in _trace_names(trace)
    assert output.count("Self CPU time total") == 1


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_log_the_mean_and_max_across_ranks_and_one_row_per_window(
    two_process_job: tuple[Path, str],
) -> None:
    rows = _csv_rows(Path(two_process_job[0], "metrics.csv"))

    def column(name: str) -> list[tuple[int, float]]:
        return [(int(row["step"]), float(row[name])) for row in rows if row.get(name)]

    # Rank r logs 10 * step + r.
    assert column("mean_v") == [(step, 10 * step + 0.5) for step in range(1, 7)]
    assert column("max_v") == [(step, 10 * step + 1.0) for step in range(1, 7)]
    assert column("min_v") == [(step, 10 * step + 1.0) for step in range(1, 7)]  # reduced with max too
    # Every 3 steps, the mean over the window's steps and both ranks.
    assert column("window_v") == [(3, 20.5), (6, 50.5)]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_two_ranks_throughput_is_this_process_times_the_world(two_process_job: tuple[Path, str]) -> None:
    rows = [row for row in _csv_rows(Path(two_process_job[0], "metrics.csv")) if row.get("throughput/steps_per_sec")]
    assert [row["step"] for row in rows] == ["3", "6"]
    for row in rows:
        device = float(row["throughput/device/samples_per_sec"])
        assert device == pytest.approx(4 * float(row["throughput/steps_per_sec"]), rel=1e-6)
        assert float(row["throughput/samples_per_sec"]) == pytest.approx(2 * device, rel=1e-6)
