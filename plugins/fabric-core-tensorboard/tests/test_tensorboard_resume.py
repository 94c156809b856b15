"""A killed job resumed from its run checkpoint continues the same TensorBoard version, read back by TensorBoard."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fabric_core.testing import run_in_own_session

pytestmark = pytest.mark.kill_resume


def job(directory: Path, options: dict[str, object], *flags: str) -> str:
    command = [sys.executable, "-m", "fabric_core.testing.resumable_job", str(directory), "tensorboard"]
    done = run_in_own_session([*command, json.dumps(options), *flags], timeout=120)
    assert done.returncode == (-signal.SIGKILL if "--kill-at" in flags else 0), done.stdout
    return done.stdout


def scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


def test_a_killed_run_resumes_its_version_and_hides_the_steps_logged_again(tmp_path: Path) -> None:
    options = {"root_dir": str(tmp_path / "tb"), "name": "exp"}
    # Checkpoints after steps 3 and 6; the events of step indices 6 and 7 are flushed, then the job is killed.
    job(tmp_path / "run", options, "--steps", "10", "--every", "3", "--kill-at", "8")
    version = tmp_path / "tb" / "exp" / "version_0"
    assert [step for step, _ in scalars(version, "step_value")] == list(range(8))

    assert "starting at step 6" in job(tmp_path / "run", options, "--steps", "10", "--every", "3")

    assert [p.name for p in (tmp_path / "tb" / "exp").iterdir()] == ["version_0"]
    assert len(list(version.glob("events.out.tfevents.*"))) == 2  # one file per process, one folder
    # TensorBoard shows each step once: the killed run's steps 6 and 7 are purged by the resumed writer's.
    assert scalars(version, "step_value") == [(step, float(step)) for step in range(10)]
    assert [step for step, _ in scalars(version, "loss")] == list(range(10))
