"""fabric-core on a real local Ray cluster: Ray Train starts the processes, Fabric trains across them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

import fabric_core_ray

pytestmark = [pytest.mark.ray, pytest.mark.multiprocess]
JOBS = Path(__file__).parent / "_jobs"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.timeout(150)
def test_ddp_on_two_ray_workers_averages_gradients(ray_cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = fabric_core_ray.run(
        JOBS / "ddp_grads.py",
        num_workers=2,
        args=[str(out)],
        accelerator="cpu",
        strategy="ddp",
        storage_path=str(tmp_path / "ray_results"),
    )
    assert result.error is None
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert {(r["world_size"], r["environment"], r["strategy"], r["backend"]) for r in ranks} == {
        (2, "RayEnvironment", "DDPStrategy", "gloo")
    }
    # Each rank saw its own data, so the local gradients differ; DDP made both the mean of the two.
    local = [torch.tensor([g for grads in r["local_grad"] for g in grads]) for r in ranks]
    assert not torch.allclose(local[0], local[1])
    for r in ranks:
        torch.testing.assert_close(
            torch.tensor([g for grads in r["synced_grad"] for g in grads]), (local[0] + local[1]) / 2
        )
    assert ranks[0]["params"] == ranks[1]["params"]
    assert [(r["local_rank"], r["node_rank"]) for r in ranks] == [(0, 0), (1, 0)]
    # The checkpoint fabric.save wrote is in Ray's storage, with rank 0's metrics.
    assert result.checkpoint is not None and result.metrics == {"step": 1, "loss": 0.5}
    with result.checkpoint.as_directory() as folder:
        assert sorted(p.name for p in Path(folder).iterdir()) == ["step1.ckpt"]
        stored = torch.load(Path(folder) / "step1.ckpt", weights_only=True)
    assert stored["step"] == 1
    assert [t.flatten().tolist() for t in stored["model"].values()] == ranks[0]["params"]
    assert Path(result.checkpoint.path).is_relative_to(tmp_path / "ray_results")


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("strategy", "cls"), [("fsdp", "FSDPStrategy"), ("deepspeed", "DeepSpeedStrategy")])
def test_sharded_strategies_train_on_ray_workers(ray_cluster: str, tmp_path: Path, strategy: str, cls: str) -> None:
    result = fabric_core_ray.run(
        JOBS / "sharded_step.py",
        num_workers=2,
        args=[str(tmp_path)],
        accelerator="cpu",
        strategy=strategy,
        storage_path=str(tmp_path / "ray_results"),
    )
    assert result.error is None
    record = json.loads((tmp_path / "done.json").read_text())
    assert (record["strategy"], record["world_size"], record["environment"], record["backend"]) == (
        cls,
        2,
        "RayEnvironment",
        "gloo",
    )
    assert record["losses"][1] < record["losses"][0]  # the step trained


@pytest.mark.timeout(200)
def test_the_cli_trains_the_example_on_ray(ray_cluster: str, tmp_path: Path) -> None:
    from fabric_core.testing import run_in_own_session

    out = tmp_path / "runs"
    command = [
        sys.executable, "-m", "fabric_core", "run", "--launcher", "ray", "--num-workers", "2",
        "--address", ray_cluster, "--strategy", "ddp", "--accelerator", "cpu",
        "--storage-path", str(tmp_path / "ray_results"),
        str(EXAMPLES / "train_classifier.py"), "--epochs", "1", "--out", str(out),
    ]  # fmt: skip
    result = run_in_own_session(command, timeout=180)
    assert result.returncode == 0, result.stdout[-5000:]
    # One job of two ranks (not two jobs of one): Ray forwards rank 0's last line to the driver.
    assert "world size 2, strategy DDPStrategy" in result.stdout
    assert (out / "checkpoint.pt").is_file()
    assert len((out / "logs" / "version_0" / "metrics.csv").read_text().splitlines()) > 1


def test_detection_outside_a_worker_is_false_with_ray_train_imported() -> None:
    import ray.train

    from fabric_core_ray.environment import RayEnvironment

    assert ray.train is not None
    assert RayEnvironment.detect() is False


FAULT_TOLERANT = EXAMPLES / "fault_tolerant.py"


def _final_model(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / f"step-{step:08d}" / "state", weights_only=False)  # our own run's file
    return dict(state["model"])


def _ray_workers_of_this_cluster() -> list[int]:
    """The Ray Train worker processes under this test's raylet (never another cluster's on the machine)."""
    import psutil
    import ray._private.worker

    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    children = psutil.Process(raylet).children(recursive=True)
    return [p.pid for p in children if any("RayTrainWorker" in part for part in p.cmdline())]


@pytest.mark.timeout(240)
@pytest.mark.skipif(not FAULT_TOLERANT.exists(), reason="examples/fault_tolerant.py (run checkpoints) is not here")
def test_a_killed_worker_is_restarted_by_ray_and_ends_with_the_uninterrupted_digest(
    ray_cluster: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import os
    import signal
    import threading
    import time

    from fabric_core.testing import run_in_own_session

    options = ["--steps", "40", "--every", "5"]
    reference = run_in_own_session(
        [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp",
         str(FAULT_TOLERANT), *options, "--dir", str(tmp_path / "reference")],
        timeout=120,
    )  # fmt: skip
    assert reference.returncode == 0, reference.stdout[-3000:]

    run_dir, killed = tmp_path / "ray", []

    def kill_a_worker_after_step_10() -> None:
        deadline = time.monotonic() + 150
        while not (run_dir / "step-00000010" / "COMMITTED").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = _ray_workers_of_this_cluster()
        if workers:
            os.kill(workers[-1], signal.SIGKILL)
            killed.append(workers[-1])

    killer = threading.Thread(target=kill_a_worker_after_step_10, daemon=True)
    killer.start()
    result = fabric_core_ray.run(
        FAULT_TOLERANT,
        num_workers=2,
        args=[*options, "--step-seconds", "0.2", "--dir", str(run_dir)],
        accelerator="cpu",
        strategy="ddp",
        max_failures=1,
        storage_path=str(tmp_path / "ray_results"),
    )
    killer.join(timeout=5)
    assert killed and result.error is None
    # Ray started the workers again and the script went on from a checkpoint, not from step 0.
    assert re.search(r"resumed at step (10|15|20|25|30|35)\b", capfd.readouterr().out)
    ours, theirs = _final_model(run_dir, 40), _final_model(tmp_path / "reference", 40)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
