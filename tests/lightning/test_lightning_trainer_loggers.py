"""``lightning.pytorch``'s Trainer and loggers on fabric-core's logger modules, in zero-edit mode, file by file.

``lightning.pytorch``'s ``TensorBoardLogger`` and ``CSVLogger`` subclass Lightning Fabric's, which zero-edit mode
(``python -m fabric_core.lightning_imports``) serves as fabric-core's; they read the base classes' private state
(``_fs``, ``_experiment``, ``_root_dir``, ...). ``_jobs/lightning_trainer_loggers_job.py`` fits a model with the
Trainer's default logger and with explicit CSV and TensorBoard loggers, twice each; it runs once in the mode
and once on Lightning itself, and both runs must leave the same files with the same contents.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("lightning.pytorch")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from fabric_core.testing import run_in_own_session

JOB = Path(__file__).parents[1] / "_jobs" / "lightning_trainer_loggers_job.py"
MODES = {"zero-edit": ["-m", "fabric_core.lightning_imports", str(JOB)], "lightning": [str(JOB)]}
VERSIONS = ("version_0", "version_1")
HPARAMS = {"lr": 0.1, "width": 4}

pytestmark = [pytest.mark.zero_edit, pytest.mark.timeout(300)]


def _run(mode: str, out: Path) -> dict[str, Any]:
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "PL_", "SLURM_"))}
    env.pop("PYTHONPATH", None)
    env["PYTHONWARNINGS"] = "ignore"
    done = run_in_own_session([sys.executable, *MODES[mode], str(out)], timeout=240, env=env)
    assert done.returncode == 0, f"{mode} run failed ({done.returncode}):\n{done.stdout[-4000:]}"
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("trainer-loggers")
    with ThreadPoolExecutor(2) as pool:
        futures = {mode: pool.submit(_run, mode, root / mode) for mode in MODES}
        return {mode: (root / mode, future.result()) for mode, future in futures.items()}


def _layout(root: Path) -> list[str]:
    """Every file and folder, event files named without their time, host and pid."""
    return sorted(re.sub(r"tfevents\..*", "tfevents", str(p.relative_to(root))) for p in root.rglob("*"))


def _events(folder: Path) -> dict[str, Any]:
    (event_file,) = folder.glob("events.out.tfevents.*")  # one writer per fit
    events = EventAccumulator(str(event_file), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    hparams = {key: getattr(value, str(value.WhichOneof("kind"))) for key, value in info.hparams.items()}
    return {"scalars": scalars, "hparams": hparams, "graph": events.Tags()["graph"]}


def _checkpoint(path: Path) -> dict[str, Any]:
    checkpoint = torch.load(path, weights_only=False)  # written by this test's own job
    return {
        "epoch": checkpoint["epoch"],
        "global_step": checkpoint["global_step"],
        "hyper_parameters": dict(checkpoint["hyper_parameters"]),
        "state_dict": {k: v.tolist() for k, v in checkpoint["state_dict"].items()},
    }


def test_the_mode_serves_fabric_cores_loggers_and_lightning_its_own(runs: dict[str, Any]) -> None:
    (_, ours), (_, theirs) = runs["zero-edit"], runs["lightning"]
    assert Path(ours["csv_logs_module"]).parent.parent.name == "fabric_core"
    assert "site-packages" in theirs["csv_logs_module"]
    assert ours["default-first"]["fabric_base"] == ["fabric_core_tensorboard.logger.TensorBoardLogger"]
    assert ours["csv-first"]["fabric_base"] == ["fabric_core.loggers.csv_logs.CSVLogger"]
    assert theirs["default-first"]["fabric_base"] == ["lightning.fabric.loggers.tensorboard.TensorBoardLogger"]


@pytest.mark.parametrize(("config", "folder"), [("default", "lightning_logs"), ("csv", "csv"), ("tb", "tb")])
def test_log_dir_versions_and_checkpoints(runs: dict[str, Any], config: str, folder: str) -> None:
    root, report = runs["zero-edit"]
    base = root / ("default" if config == "default" else "explicit")
    for run, version in zip(("first", "second"), VERSIONS, strict=True):
        fit = report[f"{config}-{run}"]
        assert fit["logger"] == ("CSVLogger" if config == "csv" else "TensorBoardLogger")
        assert fit["log_dir"] == f"{folder}/{version}" and fit["version"] == int(version[-1])
        assert fit["checkpoint"] == f"{folder}/{version}/checkpoints/epoch=1-step=8.ckpt" and fit["global_step"] == 8
        saved = _checkpoint(base / fit["checkpoint"])
        assert (saved["epoch"], saved["global_step"], saved["hyper_parameters"]) == (1, 8, HPARAMS)
        assert set(saved["state_dict"]) == {f"layer.{i}.{p}" for i in (0, 2) for p in ("weight", "bias")}


def test_default_logger_writes_tensorboard_events_and_hparams_yaml(runs: dict[str, Any]) -> None:
    root = runs["zero-edit"][0] / "default" / "lightning_logs"
    for version in VERSIONS:
        events = _events(root / version)
        loss = events["scalars"]["train_loss"]
        assert [step for step, _ in loss] == list(range(8)) and all(value > 0 for _, value in loss)
        assert [value for _, value in events["scalars"]["epoch"]] == [0.0] * 4 + [1.0] * 4
        assert events["scalars"]["hp_metric"] == [(0, -1.0)]
        assert events["hparams"] == pytest.approx(HPARAMS)
        assert events["graph"] is False  # log_graph is off by default
        assert yaml.safe_load((root / version / "hparams.yaml").read_text()) == HPARAMS


def test_explicit_csv_logger_writes_metrics_and_hparams(runs: dict[str, Any]) -> None:
    root = runs["zero-edit"][0] / "explicit" / "csv"
    for version in VERSIONS:
        with open(root / version / "metrics.csv", newline="") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
        assert reader.fieldnames == ["epoch", "step", "train_loss"]
        assert [(row["epoch"], row["step"]) for row in rows] == [(str(i // 4), str(i)) for i in range(8)]
        assert all(float(row["train_loss"]) > 0 for row in rows)
        assert yaml.safe_load((root / version / "hparams.yaml").read_text()) == {"batch_size": 4, **HPARAMS}


def test_explicit_tensorboard_logger_writes_the_graph_and_hparams(runs: dict[str, Any]) -> None:
    root = runs["zero-edit"][0] / "explicit" / "tb"
    for version in VERSIONS:
        events = _events(root / version)
        assert events["graph"] is True
        assert [step for step, _ in events["scalars"]["train_loss"]] == list(range(8))
        assert yaml.safe_load((root / version / "hparams.yaml").read_text()) == {"batch_size": 4, **HPARAMS}


def test_the_same_files_as_on_lightning(runs: dict[str, Any]) -> None:
    (ours, our_report), (theirs, their_report) = runs["zero-edit"], runs["lightning"]
    assert _layout(ours) == _layout(theirs)
    for key in our_report:
        if key != "csv_logs_module":
            assert {**our_report[key], "fabric_base": None} == {**their_report[key], "fabric_base": None}, key
    for path in ours.rglob("*"):
        name = path.relative_to(ours)
        if path.suffix in (".csv", ".yaml"):
            assert path.read_text() == (theirs / name).read_text(), name
        elif path.suffix == ".ckpt":
            assert _checkpoint(path) == _checkpoint(theirs / name), name
        elif path.is_dir() and any(path.glob("events.out.tfevents.*")):
            assert _events(path) == _events(theirs / name), name
