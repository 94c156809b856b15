"""The scripts in examples/ run for real, small: one process with `python`, two through `fabric-core run`."""

from __future__ import annotations

import csv
import importlib.util
import math
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.examples

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment() -> dict[str, str]:
    # A test run inside `fabric-core run` (or torchrun) must not hand its settings to the scripts. Unbuffered
    # output (PYTHONUNBUFFERED) would let two processes' lines interleave mid-line in the shared pipe, as print()
    # writes the text and the newline separately; buffered, each process writes whole lines.
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "PYTHONUNBUFFERED")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def run(*command: str, cwd: Path, timeout: int) -> str:
    done = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def python(script: str, *args: str, cwd: Path, timeout: int = 90) -> str:
    return run(sys.executable, str(EXAMPLES / script), *args, cwd=cwd, timeout=timeout)


def on_two_processes(script: str, *args: str, cwd: Path, timeout: int = 100) -> str:
    options = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--main-port", str(free_port()))
    return run(
        sys.executable, "-m", "fabric_core", "run", *options, str(EXAMPLES / script), *args, cwd=cwd, timeout=timeout
    )


def found(pattern: str, text: str) -> tuple[str, ...]:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{pattern!r} not in the output:\n{text[-2000:]}"
    return match.groups()


def metrics(out: Path) -> list[dict[str, str]]:
    (path,) = out.glob("logs/version_*/metrics.csv")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.timeout(100)
@pytest.mark.slow
def test_train_classifier_learns_and_writes_its_checkpoint_and_metrics(tmp_path: Path) -> None:
    out = tmp_path / "classifier"
    stdout = python("train_classifier.py", "--epochs", "1", "--out", str(out), cwd=tmp_path)
    (accuracy,) = map(float, found(r"epoch 0: loss \S+\s+val accuracy (\S+)", stdout))
    assert accuracy > 0.6  # four classes: chance is 0.25
    assert "world size 1, strategy SingleDeviceStrategy" in stdout
    assert (out / "checkpoint.pt").is_file()
    assert [row["step"] for row in metrics(out)][:2] == ["0", "20"]


@pytest.mark.timeout(100)
@pytest.mark.slow
def test_char_transformer_loss_goes_down_and_it_samples_text(tmp_path: Path) -> None:
    out = tmp_path / "chars"
    stdout = python(
        "char_transformer.py",
        *("--steps", "40", "--log-every", "10", "--sample-length", "30", "--out", str(out)),
        cwd=tmp_path,
    )
    first, last = map(float, found(r"train loss (\S+) -> (\S+)", stdout))
    assert last < first - 0.2
    found(r"^sample: (['\"])The river .{30,}\1$", stdout)  # a repr, on one line
    rows = metrics(out)
    assert [row["step"] for row in rows if row["train/loss"]] == ["10", "20", "30", "40"]
    assert float(rows[-1]["val/loss"]) < first


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_checkpoint_resume_refuses_to_resume_without_a_checkpoint(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "checkpoint_resume.py"), "--resume", "--out", str(tmp_path / "none")],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 1 and "No checkpoint at" in done.stderr


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_checkpoint_resume_on_two_ddp_processes_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    out = tmp_path / "resume"
    steps = ("--steps", "12", "--save-every", "4", "--log-every", "2", "--out", str(out))
    stdout = on_two_processes("checkpoint_resume.py", *steps, "--stop-after", "6", cwd=tmp_path)
    assert "step    4  saved" in stdout and "stopped after step 6" in stdout
    assert (out / "checkpoint").is_file()  # under ddp one file; fsdp and deepspeed write folders

    stdout = on_two_processes("checkpoint_resume.py", *steps, "--resume", "--verify", cwd=tmp_path)
    assert "resumed from" in stdout and "at step 4" in stdout
    assert "finished 12 steps, strategy DDPStrategy, world size 2" in stdout
    assert "OK: the resumed run ends with the same parameters as an uninterrupted run of 12 steps" in stdout


@pytest.mark.timeout(100)
@pytest.mark.slow
def test_lightning_module_logs_through_self_log_and_its_hooks_run(tmp_path: Path) -> None:
    out = tmp_path / "lit"
    stdout = python("lightning_module.py", "--epochs", "2", "--out", str(out), cwd=tmp_path)
    # Each hook printed or logged through the Fabric that setup gave the module: it was a callback.
    assert "on_train_start: world size 1" in stdout
    assert "hooks: on_train_start on_train_epoch_end on_train_end; 64 steps" in stdout
    rows = metrics(out)
    losses = [float(row["train_loss"]) for row in rows if row["train_loss"]]
    assert len(losses) == 64  # self.log on every step reached the CSV logger
    assert sum(losses[-8:]) < 0.5 * sum(losses[:8])
    accuracies = [float(row["val_acc"]) for row in rows if row["val_acc"]]
    (printed,) = map(float, found(r"epoch 1: val_acc (\S+)", stdout))
    assert len(accuracies) == 2 and accuracies[-1] == pytest.approx(printed, abs=1e-3) and printed > 0.7


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_kfold_on_two_ddp_processes_ranks_agree_on_the_mean_accuracy(tmp_path: Path) -> None:
    stdout = on_two_processes("kfold.py", "--folds", "3", "--epochs", "3", "--samples", "300", cwd=tmp_path)
    folds = [float(a) for a in re.findall(r"^fold \d: val accuracy (\S+)$", stdout, re.MULTILINE)]
    assert len(folds) == 3 and all(0.75 < a <= 1 for a in folds)  # two classes: chance is 0.5
    means = dict(re.findall(r"^rank (\d): mean accuracy (\S+) over 3 folds$", stdout, re.MULTILINE))
    assert set(means) == {"0", "1"} and means["0"] == means["1"]  # printed to 6 places, by each process
    assert float(means["0"]) == pytest.approx(sum(folds) / 3, abs=1e-4)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_gan_on_two_ddp_processes_learns_the_target_and_ranks_hold_identical_parameters(tmp_path: Path) -> None:
    stdout = on_two_processes("gan.py", "--steps", "200", cwd=tmp_path)
    pattern = (
        r"^rank (\d): generated mean \((\S+), (\S+)\) target \S+ \S+  loss_d (\S+)  loss_g (\S+)"
        r"  generator moved (\S+)  parameters (\w+)$"
    )
    ranks = {rank: rest for rank, *rest in re.findall(pattern, stdout, re.MULTILINE)}
    assert set(ranks) == {"0", "1"}, stdout[-2000:]
    for x, y, loss_d, loss_g, moved, _ in ranks.values():
        assert math.isfinite(float(loss_d)) and math.isfinite(float(loss_g))
        assert float(moved) > 0.5  # the generator's optimizer stepped
        # Its points started near (0, 0), 2.2 away from the target's centre: it learned where the data is.
        assert math.dist((float(x), float(y)), (2.0, -1.0)) < 0.6
    assert ranks["0"][-1] == ranks["1"][-1]  # both models bit-identical on both processes


@pytest.mark.timeout(150)
def test_build_your_own_trainer_resumes_to_the_parameters_of_an_uninterrupted_run(tmp_path: Path) -> None:
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    stdout = python("build_your_own_trainer.py", "--max-epochs", "2", "--out", str(resumed), cwd=tmp_path)
    assert "done: 2 epochs, 32 steps, last checkpoint step-000032.ckpt" in stdout  # 16 batches an epoch
    saved = sorted(p.name for p in resumed.iterdir())
    assert saved == ["step-000010.ckpt", "step-000020.ckpt", "step-000030.ckpt", "step-000032.ckpt"]
    # As if the first run had died before its final save: the newest checkpoint is from the middle of epoch 1.
    (resumed / "step-000032.ckpt").unlink()
    stdout = python("build_your_own_trainer.py", "--max-epochs", "4", "--out", str(resumed), cwd=tmp_path)
    assert "resumed from step-000030.ckpt: step 30, epoch 1" in stdout
    assert "done: 4 epochs, 64 steps" in stdout
    (after_resume,) = found(r"^parameters (\w+)$", stdout)
    stdout = python("build_your_own_trainer.py", "--max-epochs", "4", "--out", str(straight), cwd=tmp_path)
    assert "resumed" not in stdout and "done: 4 epochs, 64 steps" in stdout
    (uninterrupted,) = found(r"^parameters (\w+)$", stdout)
    assert after_resume == uninterrupted  # bit-identical: same batches, same order, same optimizer state


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_rl_collective_player_and_trainer_exchange_experience_and_weights(tmp_path: Path) -> None:
    # The script launches its two processes itself (fabric.launch); MASTER_PORT keeps parallel runs apart.
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "rl_collective.py"), "--iterations", "30"],
        cwd=tmp_path,
        env=environment() | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())},
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rewards = dict(re.findall(r"^iteration\s+(\d+): mean reward (\S+)  trainer loss (?:\S+)$", done.stdout, re.M))
    assert set(rewards) == {"0", "10", "20", "29"}, done.stdout + done.stderr[-3000:]
    # A random policy picks the paying action a third of the time; the trainer's updates reached the player.
    assert float(rewards["0"]) < 0.5 and float(rewards["29"]) > 0.75
    losses = [float(x) for x in re.findall(r"trainer loss (\S+)$", done.stdout, re.M)]
    assert all(math.isfinite(x) for x in losses) and len(set(losses)) > 1  # the metrics group carried real values
    policies = dict(re.findall(r"^rank (\d) \((?:player|trainer)\): policy (\w+)$", done.stdout, re.M))
    assert set(policies) == {"0", "1"} and policies["0"] == policies["1"]


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_tensor_parallel_shards_the_linear_layers_and_trains_as_one_unsplit_process(tmp_path: Path) -> None:
    # The script builds its own model_parallel strategy (parallelize_fn cannot come from the command line).
    weights = tmp_path / "tp" / "weights.pt"
    options = ("--accelerator", "cpu", "--devices", "2", "--main-port", str(free_port()))
    script_args = ("--steps", "40", "--seed", "7", "--lr", "0.02", "--batch-size", "16", "--out", str(weights))
    command = (sys.executable, "-m", "fabric_core", "run", *options, str(EXAMPLES / "tensor_parallel.py"))
    stdout = run(*command, *script_args, cwd=tmp_path, timeout=50)
    shards = set(re.findall(r"^rank (\d): (w\d) local shard (\d+x\d+) of (\d+x\d+)$", stdout, re.M))
    # w1 column-parallel: each rank holds half of its 64 output rows; w2 row-parallel: half of its 64 input columns.
    assert shards == {(r, "w1", "32x16", "64x16") for r in "01"} | {(r, "w2", "16x32", "16x64") for r in "01"}
    first, last = map(float, found(r"^loss (\S+) -> (\S+) in 40 steps$", stdout))
    assert last < 0.6 * first
    assert len(re.findall(r"^rank \d: OK: largest difference", stdout, re.M)) == 2

    # Independently of the script's own check: the same block, seed and batches trained in this process, unsplit.
    loaded = importlib.util.spec_from_file_location("tensor_parallel_example", EXAMPLES / "tensor_parallel.py")
    assert loaded is not None and loaded.loader is not None
    example = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(example)
    reference = example.make_model(7)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=0.02)
    for x, y in example.batches(40, 16, 7):
        torch.autograd.backward(torch.nn.functional.mse_loss(reference(x), y))
        optimizer.step()
        optimizer.zero_grad()
    gathered = torch.load(weights, weights_only=True)
    expected = {name: p.detach() for name, p in reference.named_parameters()}
    assert sorted(gathered) == sorted(expected) == ["w1.weight", "w2.weight", "w3.weight"]
    initial = example.make_model(7).state_dict()
    for name, tensor in gathered.items():
        torch.testing.assert_close(tensor, expected[name], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(tensor, initial[name])  # it trained
