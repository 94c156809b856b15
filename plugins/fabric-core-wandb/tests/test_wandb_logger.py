"""The W&B logger in offline mode (no network), read back from the run's ``.wandb`` file with wandb's protobufs."""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from wandb.proto import wandb_internal_pb2

from fabric_core import Fabric, spec
from fabric_core.testing import check_plugin, fake_distribution, make_manager, run_in_own_session
from fabric_core_wandb import WandbLogger, _plugin

HERE = Path(__file__).parent
ENTRY = {"wandb": "fabric_core_wandb._plugin"}
#: No network, nothing printed, no git/code/system probes: a quick offline run.
OFFLINE = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_CONSOLE": "off",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_X_DISABLE_STATS": "true",
    "WANDB_X_DISABLE_MACHINE_INFO": "true",
}


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {**OFFLINE, "WANDB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    for key in ("WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_ENTITY", "WANDB_API_KEY"):
        monkeypatch.delenv(key, raising=False)


# -- reading an offline run ---------------------------------------------------------------------------


def records(run_file: Path) -> Iterator[Any]:
    """The ``Record`` messages of a ``.wandb`` file (wandb's LevelDB-style log: 32 KiB blocks of chunks)."""
    data, block, pending = run_file.read_bytes(), 32768, b""
    assert data[:4] == b":W&B", data[:8]
    pos = 7  # ":W&B", a 2-byte magic number, a version byte
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's zero padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # full, first | middle, last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def _key(item: Any) -> str:
    return "/".join(item.nested_key) if item.nested_key else str(item.key)


class OfflineRun:
    """What one offline run recorded: its id, name, project, config, history rows and whether it exited."""

    def __init__(self, folder: Path) -> None:
        (run_file,) = folder.glob("run-*.wandb")
        self.config: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.exit_code: int | None = None
        self.artifacts: list[tuple[str, str, list[tuple[str, int]]]] = []
        for record in records(run_file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                self.id, self.name, self.project = record.run.run_id, record.run.display_name, record.run.project
                self.tags = list(record.run.tags)
                self._config(record.run.config)
            elif kind == "config":
                self._config(record.config)
            elif kind == "history":
                row = {_key(i): json.loads(i.value_json) for i in record.history.item}
                self.history.append({k: v for k, v in row.items() if not k.startswith("_") or k == "_step"})
            elif kind == "artifact":
                entries = [(e.path, e.size) for e in record.artifact.manifest.contents]
                self.artifacts.append((record.artifact.name, record.artifact.type, entries))
            elif kind == "exit":
                self.exit_code = record.exit.exit_code

    def _config(self, config: Any) -> None:
        for item in config.update:
            if _key(item) != "_wandb":
                self.config[_key(item)] = json.loads(item.value_json)


def run_folders(root: Path) -> list[Path]:
    return sorted((root / "wandb").glob("offline-run-*"))


def the_run(root: Path) -> OfflineRun:
    folders = run_folders(root)
    assert len(folders) == 1, folders
    return OfflineRun(folders[0])


# -- tests ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_fabric_run_is_recorded_offline_and_read_back(tmp_path: Path) -> None:
    fabric = Fabric(
        accelerator="cpu",
        loggers=spec("wandb", project="mnist", run_name="baseline", save_dir=tmp_path, tags=["cpu"]),
        plugin_manager=make_manager(("wandb", _plugin)),
    )
    logger = fabric.logger
    assert isinstance(logger, WandbLogger)
    logger.log_hyperparams(
        argparse.Namespace(lr=0.01, optimizer={"name": "sgd", "betas": [0.9, 0.99]}, data=argparse.Namespace(bs=8))
    )
    for step, loss in enumerate([0.5, 0.25]):
        fabric.log_dict({"train/loss": torch.tensor(loss), "lr": 0.01}, step=step * 10)
    checkpoint = tmp_path / "last.ckpt"
    fabric.save(checkpoint, {"model": torch.nn.Linear(2, 1)})
    logger.log_artifact(checkpoint)
    run_id = logger.version
    logger.finalize("success")

    run = the_run(tmp_path)
    assert (run.id, run.name, run.project, run.tags) == (run_id, "baseline", "mnist", ["cpu"])
    assert run.config == {"lr": 0.01, "optimizer": {"name": "sgd", "betas": [0.9, 0.99]}, "data": {"bs": 8}}
    assert run.history == [
        {"train/loss": 0.5, "lr": 0.01, "_step": 0},
        {"train/loss": 0.25, "lr": 0.01, "_step": 10},
    ]
    assert run.exit_code == 0
    assert run.artifacts == [(f"{run_id}-last.ckpt", "model", [("last.ckpt", checkpoint.stat().st_size)])]


def test_prefix_steps_and_a_failed_end(tmp_path: Path) -> None:
    logger = WandbLogger(project="p", save_dir=tmp_path, prefix="fold1")
    logger.log_metrics({"loss": 1.0})
    logger.log_metrics({"loss": 0.5}, step=5)
    logger.finalize("failed")
    run = the_run(tmp_path)
    assert [(row["_step"], row["fold1-loss"]) for row in run.history] == [(0, 1.0), (5, 0.5)]
    assert run.exit_code == 1


def test_other_ranks_start_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    logger = WandbLogger(project="p", save_dir=tmp_path / "logs")
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.log_artifact(tmp_path / "not-read-on-rank-1")
    logger.experiment.alert(title="x", text="y")
    logger.finalize("success")
    assert logger.version is None
    assert not (tmp_path / "logs").exists() and not (tmp_path / "wandb").exists()


@pytest.mark.parametrize(("value", "shown"), [("high", "'high'"), (torch.ones(2), "tensor"), (None, "None")])
def test_a_bad_metric_is_refused_naming_it(tmp_path: Path, value: Any, shown: str) -> None:
    with pytest.raises(ValueError, match="'bad'") as info:
        WandbLogger(save_dir=tmp_path).log_metrics({"good": 1.0, "bad": value})
    assert shown in str(info.value)
    assert run_folders(tmp_path) == []  # refused before a run started


def test_bad_options_and_params_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tags='cpu'"):
        WandbLogger(tags="cpu")  # type: ignore[arg-type]
    logger = WandbLogger(save_dir=tmp_path)
    with pytest.raises(ValueError, match="got list"):
        logger.log_hyperparams([("lr", 0.1)])  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match=r"nope\.ckpt"):
        logger.log_artifact(tmp_path / "nope.ckpt")
    logger.finalize("failed")


def test_plugin_meets_the_contract_and_is_listed(tmp_path: Path) -> None:
    with fake_distribution(
        "fabric-core-wandb", entry_points=ENTRY, requires=["fabric-core>=0.1,<0.2", "wandb>=0.17"], root=tmp_path
    ) as folder:
        assert check_plugin("wandb") == []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
        listed = run_in_own_session([sys.executable, "-m", "fabric_core", "list-plugins"], timeout=60, env=env)
    assert listed.returncode == 0, listed.stdout
    assert any(line.split()[:3] == ["wandb", "loaded", "fabric-core-wandb"] for line in listed.stdout.splitlines())
    assert any(line.split()[:3] == ["logger", "wandb", "wandb"] for line in listed.stdout.splitlines())


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_two_processes_make_exactly_one_run(tmp_path: Path) -> None:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    with fake_distribution("fabric-core-wandb", entry_points=ENTRY, root=tmp_path / "dist") as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(HERE.parent), os.environ.get("PYTHONPATH", "")])
        env["WANDB_DIR"] = str(tmp_path / "logs")
        command = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2"]
        result = run_in_own_session([*command, str(HERE / "wandb_job.py"), str(tmp_path / "logs")], 150, env)
    assert result.returncode == 0, result.stdout[-3000:]
    run = the_run(tmp_path / "logs")
    assert run.config == {"world_size": 2}
    assert [(row["_step"], row["rank"], row["step_value"]) for row in run.history] == [
        (0, 0.0, 0.0),
        (1, 0.0, 1.0),
        (2, 0.0, 2.0),
    ]
    assert run.exit_code == 0


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_the_readme_example_runs_offline(tmp_path: Path) -> None:
    code = (HERE.parent / "README.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
    with fake_distribution("fabric-core-wandb", entry_points=ENTRY, root=tmp_path / "dist") as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RANK", "LOCAL_RANK"))}
        env.update({k: v for k, v in OFFLINE.items() if k != "WANDB_MODE"})  # offline=True does it
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(HERE.parent), os.environ.get("PYTHONPATH", "")])
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run = the_run(tmp_path)
    assert f"run {run.id} written under {tmp_path}" in done.stdout
    assert [row["_step"] for row in run.history] == list(range(20))
    assert run.config == {"lr": 0.05, "optimizer": {"name": "sgd"}}
    assert [(name, kind) for name, kind, _ in run.artifacts] == [(f"{run.id}-last.ckpt", "model")]


def test_a_run_the_script_started_is_logged_into_and_left_open(tmp_path: Path) -> None:
    import wandb

    own = wandb.init(project="mine", dir=str(tmp_path))
    try:
        logger = WandbLogger(project="ignored", save_dir=tmp_path)
        logger.log_metrics({"loss": 1.0}, step=0)
        assert logger.version == own.id
        logger.finalize("success")
        assert wandb.run is own  # still the script's to end
        own.log({"loss": 0.5}, step=1)
    finally:
        own.finish()
        wandb.teardown()
    run = the_run(tmp_path)
    assert (run.project, [row["loss"] for row in run.history], run.exit_code) == ("mine", [1.0, 0.5], 0)


def test_registration_imports_neither_torch_nor_wandb() -> None:
    code = (
        "import sys, fabric_core_wandb, fabric_core_wandb._plugin; "
        "print(sorted(m for m in ('torch', 'wandb', 'rich') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.timeout(120)
@pytest.mark.kill_resume
def test_a_preempted_job_resumes_the_same_run(tmp_path: Path) -> None:
    """Preempted at step 4 (a checkpoint there), resumed: W&B writes a second offline folder for the same run id."""
    job = [sys.executable, "-m", "fabric_core.testing.resumable_job", str(tmp_path / "run"), "wandb"]
    job += [json.dumps({"project": "p", "save_dir": str(tmp_path)}), "--steps", "7", "--every", "100"]
    first = run_in_own_session([*job, "--term-at", "4"], timeout=100)
    assert first.returncode == 143 and "preempted by SIGTERM at step 4" in first.stdout, first.stdout
    (interrupted,) = run_folders(tmp_path)
    second = run_in_own_session(job, timeout=100)
    assert second.returncode == 0 and "starting at step 4" in second.stdout, second.stdout

    folders = run_folders(tmp_path)
    assert len(folders) == 2 and interrupted in folders
    before, after = OfflineRun(interrupted), OfflineRun(next(f for f in folders if f != interrupted))
    assert before.id == after.id and after.project == "p"
    assert interrupted.name.endswith(f"-{before.id}") and all(f.name.endswith(f"-{before.id}") for f in folders)
    assert [(row["_step"], row["step_value"]) for row in before.history] == [(s, float(s)) for s in range(4)]
    assert [(row["_step"], row["step_value"]) for row in after.history] == [(s, float(s)) for s in range(4, 7)]
    assert after.exit_code == 0


# -- where the run files go: save_dir, else WANDB_DIR, else the working directory ---------------------------


def _one_step_run(logger: WandbLogger) -> str:
    logger.log_metrics({"loss": 1.0}, step=0)
    run_id = str(logger.version)
    logger.finalize("success")
    return run_id


def test_wandb_dir_holds_the_run_when_no_save_dir_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd, wandb_dir = tmp_path / "cwd", tmp_path / "from-env"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    logger = WandbLogger(project="p")
    assert logger.root_dir == str(wandb_dir) and logger.log_dir == str(wandb_dir)
    run_id = _one_step_run(logger)
    assert the_run(wandb_dir).id == run_id
    assert list(cwd.iterdir()) == []  # not the ./wandb of the working directory


def test_the_working_directory_holds_the_run_without_save_dir_or_wandb_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WANDB_DIR")
    monkeypatch.chdir(tmp_path)
    logger = WandbLogger(project="p")
    assert (logger.root_dir, logger.log_dir) == (".", str(tmp_path))
    run_id = _one_step_run(logger)
    assert the_run(tmp_path).id == run_id


def test_an_explicit_save_dir_wins_over_wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wandb_dir, save_dir = tmp_path / "from-env", tmp_path / "given"
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    logger = WandbLogger(project="p", save_dir=save_dir)
    assert logger.log_dir == str(save_dir)
    run_id = _one_step_run(logger)
    assert the_run(save_dir).id == run_id
    assert not wandb_dir.exists()
