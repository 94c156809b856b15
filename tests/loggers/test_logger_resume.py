"""A job resumed from a run checkpoint logs into the same run: the CSV logger, and RunCheckpoints' side of it."""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core import Fabric, RunCheckpoints
from fabric_core.errors import InvalidConfigError
from fabric_core.loggers.csv_logs import CSVLogger
from fabric_core.loggers.logger import Logger
from fabric_core.run_checkpoints import LOGGERS_KEY, STATE
from fabric_core.testing import resumable_job, run_in_own_session


def job(directory: Path, logger: str, options: dict[str, Any], *flags: str) -> str:
    """Run ``fabric_core.testing.resumable_job`` once; its output."""
    command = [sys.executable, "-m", "fabric_core.testing.resumable_job", str(directory), logger, json.dumps(options)]
    done = run_in_own_session([*command, *flags], timeout=120)
    expected = -signal.SIGKILL if "--kill-at" in flags else 143 if "--term-at" in flags else 0
    assert done.returncode == expected, done.stdout
    return done.stdout


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]], str]:
    text = path.read_text()
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        rows = list(reader)
    return list(reader.fieldnames or []), rows, text


@pytest.mark.kill_resume
def test_a_killed_csv_run_resumes_its_version_without_duplicate_rows(tmp_path: Path) -> None:
    options = {"root_dir": str(tmp_path / "logs"), "name": "exp", "flush_logs_every_n_steps": 1}
    # Checkpoints after steps 3 and 6; the kill comes after step index 7 was logged and written.
    job(tmp_path / "run", "csv", options, "--steps", "10", "--every", "3", "--kill-at", "8")
    metrics = tmp_path / "logs" / "exp" / "version_0" / "metrics.csv"
    assert [r["step"] for r in read_csv(metrics)[1]] == [str(i) for i in range(8)]

    assert "starting at step 6" in job(tmp_path / "run", "csv", options, "--steps", "10", "--every", "3")

    assert sorted(p.name for p in (tmp_path / "logs" / "exp").iterdir()) == ["version_0"]
    columns, rows, text = read_csv(metrics)
    assert columns == ["loss", "step", "step_value"]
    assert text.count("loss,step,step_value") == 1
    # Rows 6 and 7 of the killed run were dropped on resume and logged again: each step exactly once.
    assert [(r["step"], r["step_value"]) for r in rows] == [(str(i), f"{float(i)}") for i in range(10)]
    assert all(float(r["loss"]) > 0 for r in rows)


# -- in one process --------------------------------------------------------------------------------------


def state_for(fabric: Fabric) -> dict[str, Any]:
    model = torch.nn.Linear(2, 1)
    return {"model": fabric.setup_module(model)}


def test_the_checkpoint_holds_each_loggers_identity(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", loggers=[CSVLogger(tmp_path / "a"), CSVLogger(tmp_path / "b", version="x")])
    fabric.log("m", 1.0, step=0)
    RunCheckpoints(fabric, tmp_path / "run", signals=()).save(1, state_for(fabric))
    saved = torch.load(tmp_path / "run" / "step-00000001" / STATE, weights_only=True)[LOGGERS_KEY]
    assert saved == [
        {"logger": "CSVLogger", "identity": {"version": 0, "rows": 1}},
        {"logger": "CSVLogger", "identity": {"version": "x", "rows": 1}},
    ]
    # The checkpoint wrote the buffered row.
    assert (tmp_path / "a" / "lightning_logs" / "version_0" / "metrics.csv").read_text() == "m,step\n1.0,0\n"


def test_a_logger_that_already_wrote_keeps_its_version_and_warns(tmp_path: Path) -> None:
    first = Fabric(accelerator="cpu", loggers=CSVLogger(tmp_path, flush_logs_every_n_steps=1))
    first.log("m", 1.0, step=0)
    RunCheckpoints(first, tmp_path / "run", signals=()).save(1, state_for(first))

    late = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    second = Fabric(accelerator="cpu", loggers=late)
    second.log("m", 2.0, step=1)  # before resume: version_1 is started
    with pytest.warns(UserWarning, match=r"CSVLogger already started 1 .* instead of continuing 0\. Call `RunCheck"):
        RunCheckpoints(second, tmp_path / "run", signals=()).resume(state_for(second))
    assert late.version == 1


def test_a_different_set_of_loggers_is_not_reattached(tmp_path: Path) -> None:
    first = Fabric(accelerator="cpu", loggers=CSVLogger(tmp_path))
    first.log("m", 1.0, step=0)
    RunCheckpoints(first, tmp_path / "run", signals=()).save(1, state_for(first))

    two = Fabric(accelerator="cpu", loggers=[CSVLogger(tmp_path), CSVLogger(tmp_path / "other")])
    with pytest.warns(UserWarning, match="names the runs of 1 loggers but this Fabric has 2"):
        RunCheckpoints(two, tmp_path / "run", signals=()).resume(state_for(two))
    assert two.loggers[0].version == 1

    class Other(CSVLogger):
        pass

    other = Fabric(accelerator="cpu", loggers=Other(tmp_path))
    with pytest.warns(UserWarning, match="holds the run of a CSVLogger where this Fabric has a Other"):
        RunCheckpoints(other, tmp_path / "run", signals=()).resume(state_for(other))


def test_a_logger_without_the_protocol_saves_none_and_resumes(tmp_path: Path) -> None:
    class Plain(Logger):
        name, version = "plain", 0

        def log_metrics(self, metrics: Any, step: int | None = None) -> None:
            pass

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

    fabric = Fabric(accelerator="cpu", loggers=Plain())
    ckpt = RunCheckpoints(fabric, tmp_path / "run", signals=())
    ckpt.save(2, state_for(fabric))
    assert torch.load(tmp_path / "run" / "step-00000002" / STATE)[LOGGERS_KEY] == [
        {"logger": "Plain", "identity": None}
    ]
    assert ckpt.resume(state_for(fabric)) == 2


def test_the_loggers_key_is_reserved(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu")
    with pytest.raises(InvalidConfigError, match="'loggers', which run checkpoints keep for the loggers' runs"):
        RunCheckpoints(fabric, tmp_path, signals=()).save(1, {LOGGERS_KEY: 1})


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.kill_resume
def test_a_preempted_two_process_job_resumes_one_version(tmp_path: Path) -> None:
    """Rank 0's identity is saved and given to both ranks; rank 1 writes nothing and makes no version.

    The rows sit in the logger's buffer (100 rows by default) when SIGTERM arrives: the checkpoint writes them.
    """
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    script = Path(resumable_job.__file__)
    launch = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2", str(script)]
    options = json.dumps({"root_dir": str(tmp_path / "logs")})
    command = [*launch, str(tmp_path / "run"), "csv", options, "--steps", "7", "--every", "100", "--devices", "2"]
    first = run_in_own_session([*command, "--term-at", "3"], timeout=150, env=env)
    assert first.returncode == 143 and "preempted by SIGTERM at step 3" in first.stdout, first.stdout[-3000:]
    second = run_in_own_session(command, timeout=150, env=env)
    assert second.returncode == 0 and "starting at step 3" in second.stdout, second.stdout[-3000:]
    assert [p.name for p in (tmp_path / "logs" / "lightning_logs").iterdir()] == ["version_0"]
    _, rows, _ = read_csv(tmp_path / "logs" / "lightning_logs" / "version_0" / "metrics.csv")
    assert [(r["step"], r["step_value"]) for r in rows] == [(str(i), f"{float(i)}") for i in range(7)]
