"""A job resumed from its run checkpoint logs into the same MLflow run, read back with ``MlflowClient``."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from fabric_core import Fabric, RunCheckpoints
from fabric_core.testing import run_in_own_session
from fabric_core_mlflow import MLFlowLogger

pytestmark = pytest.mark.kill_resume


@pytest.fixture(autouse=True)
def _no_ambient_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def job(directory: Path, options: dict[str, object], *flags: str) -> str:
    command = [sys.executable, "-m", "fabric_core.testing.resumable_job", str(directory), "mlflow"]
    done = run_in_own_session([*command, json.dumps(options), *flags], timeout=120)
    assert done.returncode == (-signal.SIGKILL if "--kill-at" in flags else 0), done.stdout
    return done.stdout


def the_run(root: Path) -> tuple[MlflowClient, str, str]:
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lightning_logs")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return client, runs[0].info.run_id, runs[0].info.status


def test_a_killed_run_is_continued_not_duplicated(tmp_path: Path, new_store: Callable[[Path], Path]) -> None:
    new_store(tmp_path / "store" / "mlflow.db")
    options = {"root_dir": str(tmp_path / "store")}
    # Checkpoints after steps 3 and 6; the job is killed after logging step index 7.
    job(tmp_path / "run", options, "--steps", "10", "--every", "3", "--kill-at", "8")
    client, run_id, status = the_run(tmp_path / "store")
    assert status == "RUNNING"  # killed: nothing ended it
    assert [m.step for m in client.get_metric_history(run_id, "step_value")] == list(range(8))

    assert "starting at step 6" in job(tmp_path / "run", options, "--steps", "10", "--every", "3")

    client, resumed_id, status = the_run(tmp_path / "store")
    assert (resumed_id, status) == (run_id, "FINISHED")
    history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, "step_value"))
    # Steps 6 and 7 were logged after the last checkpoint: once by the killed job, once by the resumed one.
    assert history == sorted([(s, float(s)) for s in range(10)] + [(6, 6.0), (7, 7.0)])
    assert len(client.get_metric_history(run_id, "loss")) == 12


def test_a_finished_run_goes_back_to_running_then_finishes(tmp_path: Path, new_store: Callable[[Path], Path]) -> None:
    new_store(tmp_path / "mlflow.db")
    first = Fabric(accelerator="cpu", loggers=MLFlowLogger(root_dir=tmp_path))
    first.log("m", 1.0, step=0)
    RunCheckpoints(first, tmp_path / "run", signals=()).save(1, {"model": first.setup_module(torch.nn.Linear(2, 1))})
    first.logger.finalize("success")
    client, run_id, status = the_run(tmp_path)
    assert status == "FINISHED"

    logger = MLFlowLogger(root_dir=tmp_path)
    second = Fabric(accelerator="cpu", loggers=logger)
    assert RunCheckpoints(second, tmp_path / "run", signals=()).resume({"model": torch.nn.Linear(2, 1)}) == 1
    second.log("m", 2.0, step=1)
    assert logger.run_id == run_id and client.get_run(run_id).info.status == "RUNNING"
    logger.finalize("success")
    assert the_run(tmp_path)[1:] == (run_id, "FINISHED")
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "m")] == [(0, 1.0), (1, 2.0)]


def test_a_logger_that_already_started_a_run_keeps_it_and_warns(
    tmp_path: Path, new_store: Callable[[Path], Path]
) -> None:
    new_store(tmp_path / "mlflow.db")
    first = Fabric(accelerator="cpu", loggers=MLFlowLogger(root_dir=tmp_path))
    RunCheckpoints(first, tmp_path / "run", signals=()).save(1, {})
    saved = first.logger.version
    late = MLFlowLogger(root_dir=tmp_path)
    late.log_metrics({"m": 1.0}, step=0)  # creates a second run before the resume
    second = Fabric(accelerator="cpu", loggers=late)
    with pytest.warns(UserWarning, match=f"MLFlowLogger already started .* instead of continuing '{saved}'"):
        RunCheckpoints(second, tmp_path / "run", signals=()).resume({})
    assert late.run_id != saved
