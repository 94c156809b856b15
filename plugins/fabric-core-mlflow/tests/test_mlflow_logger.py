"""The MLflow logger against a real local store, read back with ``MlflowClient``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from fabric_core import Fabric, spec
from fabric_core.testing import check_plugin, fake_distribution, make_manager, run_in_own_session
from fabric_core_mlflow import MLFlowLogger, _plugin

HERE = Path(__file__).parent
PLUGIN_ROOT = HERE.parent
ENTRY = {"mlflow": "fabric_core_mlflow._plugin"}


@pytest.fixture(autouse=True)
def _no_ambient_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def store(tmp_path: Path, new_store: Callable[[Path], Path]) -> Path:
    """``tmp_path`` with a migrated ``mlflow.db``: the default store of a logger whose ``root_dir`` it is."""
    new_store(tmp_path / "mlflow.db")
    return tmp_path


def client_for(root: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")


def only_run(client: MlflowClient, experiment: str = "lightning_logs") -> Any:
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return runs[0]


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


@pytest.mark.slow
def test_a_fabric_run_is_recorded_and_read_back(store: Path) -> None:
    checkpoint = store / "ckpt" / "last.ckpt"
    fabric = Fabric(
        accelerator="cpu",
        loggers=spec("mlflow", root_dir=store, experiment_name="exp", run_name="first", tags={"team": "vision"}),
        plugin_manager=make_manager(("mlflow", _plugin)),
    )
    logger = fabric.logger
    assert isinstance(logger, MLFlowLogger)
    logger.log_hyperparams({"lr": 0.01, "optimizer": {"name": "sgd", "betas": (0.9, 0.99)}, "extra": None})
    for step, loss in enumerate([0.5, 0.25, 0.125]):
        fabric.log_dict({"train/loss": torch.tensor(loss), "lr": 0.01}, step=step * 10)
    logger.set_tags({"stage": "pretrain"})
    fabric.save(checkpoint, {"model": torch.nn.Linear(2, 1)})
    logger.log_artifact(checkpoint, artifact_path="checkpoints")
    logger.finalize("success")

    client = client_for(store)
    run = only_run(client, "exp")
    assert run.info.run_id == logger.run_id and run.info.run_name == "first"
    assert run.info.status == "FINISHED"
    assert history(client, run.info.run_id, "train/loss") == [(0, 0.5), (10, 0.25), (20, 0.125)]
    assert history(client, run.info.run_id, "lr") == [(0, 0.01), (10, 0.01), (20, 0.01)]
    assert run.data.params == {
        "lr": "0.01",
        "optimizer/name": "sgd",
        "optimizer/betas": "(0.9, 0.99)",
        "extra": "None",
    }
    assert run.data.tags["team"] == "vision" and run.data.tags["stage"] == "pretrain"
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")] == ["checkpoints/last.ckpt"]
    # The default store lives under root_dir, artifacts included.
    assert (store / "mlflow.db").is_file()
    assert list((store / "mlartifacts").rglob("last.ckpt"))


def test_checkpoints_are_uploaded_on_success_only(store: Path) -> None:
    folder = store / "ckpts"
    (folder / "step_2").mkdir(parents=True)
    (folder / "step_2" / "shard_0.pt").write_bytes(b"weights")
    ok = MLFlowLogger(root_dir=store, run_name="ok", log_checkpoints=folder)
    ok.log_metrics({"loss": 1.0})
    ok.finalize("success")
    failed = MLFlowLogger(root_dir=store, run_name="failed", log_checkpoints=folder)
    failed.log_metrics({"loss": 1.0})
    failed.finalize("failed")

    client = client_for(store)
    assert [a.path for a in client.list_artifacts(ok.run_id, "checkpoints/ckpts/step_2")] == [
        "checkpoints/ckpts/step_2/shard_0.pt"
    ]
    assert client.list_artifacts(failed.run_id) == []
    assert client.get_run(failed.run_id).info.status == "FAILED"


def test_tracking_uri_from_the_environment_and_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_store: Callable[[Path], Path]
) -> None:
    env_store, option_store = new_store(tmp_path / "env.db"), new_store(tmp_path / "option.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{env_store}")
    from_env = MLFlowLogger(root_dir=tmp_path / "unused")
    from_env.log_metrics({"a": 1.0}, step=1)
    from_option = MLFlowLogger(tracking_uri=f"sqlite:///{option_store}", root_dir=tmp_path / "unused")
    from_option.log_metrics({"b": 2.0}, step=2)
    assert not (tmp_path / "unused").exists()
    env_run = only_run(MlflowClient(f"sqlite:///{env_store}"))
    option_run = only_run(MlflowClient(f"sqlite:///{option_store}"))
    assert (env_run.data.metrics, option_run.data.metrics) == ({"a": 1.0}, {"b": 2.0})


def test_run_id_reattaches_to_the_same_run(store: Path) -> None:
    first = MLFlowLogger(root_dir=store)
    first.log_metrics({"loss": 1.0}, step=0)
    again = MLFlowLogger(root_dir=store, run_id=first.run_id)
    again.log_metrics({"loss": 0.5}, step=1)
    client = client_for(store)
    assert history(client, only_run(client).info.run_id, "loss") == [(0, 1.0), (1, 0.5)]


def test_namespace_params_and_prefix(store: Path) -> None:
    logger = MLFlowLogger(root_dir=store, prefix="fold1")
    logger.log_hyperparams(argparse.Namespace(epochs=3, data=argparse.Namespace(root="/data")))
    logger.log_metrics({"loss": 0.5}, step=3)
    run = only_run(client_for(store))
    assert run.data.params == {"epochs": "3", "data/root": "/data"}
    assert run.data.metrics == {"fold1-loss": 0.5}


def test_other_ranks_record_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    logger = MLFlowLogger(root_dir=tmp_path, log_checkpoints=tmp_path)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.set_tags({"a": "b"})
    logger.log_artifact(tmp_path / "missing-is-fine-on-rank-1")
    logger.experiment.log_text("run", "text", "x.txt")
    logger.finalize("success")
    assert logger.run_id is None and logger.version is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("value", "shown"), [("high", "'high'"), (torch.ones(2), "tensor"), (None, "None")])
def test_a_bad_metric_is_refused_naming_it(tmp_path: Path, value: Any, shown: str) -> None:
    logger = MLFlowLogger(root_dir=tmp_path)
    with pytest.raises(ValueError, match="'bad'") as info:
        logger.log_metrics({"good": 1.0, "bad": value})
    assert shown in str(info.value)
    assert not (tmp_path / "mlflow.db").exists()  # refused before the run was created


def test_bad_options_and_params_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="experiment_name=''"):
        MLFlowLogger(experiment_name="")
    with pytest.raises(ValueError, match="tags=\\['a'\\]"):
        MLFlowLogger(tags=["a"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="got list"):
        MLFlowLogger(root_dir=tmp_path).log_hyperparams([("lr", 0.1)])  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match=r"nope\.ckpt"):
        MLFlowLogger(root_dir=tmp_path).log_artifact(tmp_path / "nope.ckpt")


def test_plugin_meets_the_contract_and_is_listed(tmp_path: Path) -> None:
    with fake_distribution(
        "fabric-core-mlflow", entry_points=ENTRY, requires=["fabric-core>=0.1,<0.2", "mlflow>=2.12"], root=tmp_path
    ) as folder:
        assert check_plugin("mlflow") == []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
        listed = run_in_own_session([sys.executable, "-m", "fabric_core", "list-plugins"], timeout=60, env=env)
    assert listed.returncode == 0, listed.stdout
    assert any(line.split()[:3] == ["mlflow", "loaded", "fabric-core-mlflow"] for line in listed.stdout.splitlines())
    assert any(line.split()[:3] == ["logger", "mlflow", "mlflow"] for line in listed.stdout.splitlines())


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_two_processes_record_exactly_one_run(tmp_path: Path, new_store: Callable[[Path], Path]) -> None:
    new_store(tmp_path / "store" / "mlflow.db")
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    with fake_distribution("fabric-core-mlflow", entry_points=ENTRY, root=tmp_path / "dist") as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(PLUGIN_ROOT), os.environ.get("PYTHONPATH", "")])
        command = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2"]
        result = run_in_own_session([*command, str(HERE / "mlflow_job.py"), str(tmp_path / "store")], 150, env)
    assert result.returncode == 0, result.stdout[-3000:]
    client = client_for(tmp_path / "store")
    run = only_run(client)
    assert run.info.run_name == "ddp" and run.info.status == "FINISHED"
    assert run.data.params == {"world_size": "2"}
    assert history(client, run.info.run_id, "rank") == [(0, 0.0), (1, 0.0), (2, 0.0)]  # rank 0's values only
    assert history(client, run.info.run_id, "step_value") == [(0, 0.0), (1, 1.0), (2, 2.0)]


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_the_readme_example_runs_and_records_its_run(tmp_path: Path, new_store: Callable[[Path], Path]) -> None:
    readme = (PLUGIN_ROOT / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    new_store(tmp_path / "mlflow.db")  # the example's default store, in its working directory
    with fake_distribution("fabric-core-mlflow", entry_points=ENTRY, root=tmp_path / "dist") as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RANK", "LOCAL_RANK"))}
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(PLUGIN_ROOT), os.environ.get("PYTHONPATH", "")])
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    client = client_for(tmp_path)
    run = only_run(client, "demo")
    assert f"run {run.info.run_id} recorded in sqlite:///{tmp_path}/mlflow.db" in done.stdout
    assert [step for step, _ in history(client, run.info.run_id, "train/loss")] == list(range(20))
    assert run.data.params == {"lr": "0.05", "optimizer/name": "sgd"} and run.data.tags["team"] == "vision"
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")] == ["checkpoints/last.ckpt"]


def test_registration_imports_neither_torch_nor_mlflow() -> None:
    code = (
        "import sys, fabric_core_mlflow, fabric_core_mlflow._plugin; "
        "print(sorted(m for m in ('torch', 'mlflow', 'rich') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
