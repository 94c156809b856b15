"""RunCheckpoints in one process: which checkpoint is chosen, what is pruned, digests, RNG states, bad input."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fabric_core import Fabric, RunCheckpoints
from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io.atomic import temp_path_for
from fabric_core.run_checkpoints import MARKER, STATE, check_digests


@pytest.fixture
def fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1)


def make_state(fabric: Fabric, seed: int = 0) -> dict[str, object]:
    torch.manual_seed(seed)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    return {"model": model, "optimizer": optimizer, "note": f"seed {seed}"}


def checkpoints(fabric: Fabric, directory: Path, **options: object) -> RunCheckpoints:
    return RunCheckpoints(fabric, directory, signals=(), **options)  # type: ignore[arg-type]


def weight(state: dict[str, object]) -> torch.Tensor:
    return state["model"].weight.detach().clone()  # type: ignore[attr-defined]


def test_resume_without_a_checkpoint_changes_nothing_and_returns_none(fabric: Fabric, tmp_path: Path) -> None:
    state = make_state(fabric)
    before = weight(state)
    assert checkpoints(fabric, tmp_path / "missing").resume(state) is None
    assert torch.equal(weight(state), before) and state["note"] == "seed 0"
    assert not (tmp_path / "missing").exists()


def test_a_folder_without_its_commit_marker_is_never_chosen(fabric: Fabric, tmp_path: Path) -> None:
    ckpt = checkpoints(fabric, tmp_path, keep_last=None)
    saved = make_state(fabric, seed=1)
    ckpt.save(2, saved)
    # Newer folders that look complete but are not: no marker; a marker naming another step; a complete
    # folder still under its temp name (a save in flight); a marker that is not JSON.
    for name in ("step-00000003", "step-00000004", "step-00000006"):
        shutil.copytree(tmp_path / "step-00000002", tmp_path / name)
    (tmp_path / "step-00000003" / MARKER).unlink()
    (tmp_path / "step-00000004" / MARKER).write_text(json.dumps({"step": 2, "files": {}}))
    (tmp_path / "step-00000006" / MARKER).write_text("{half")
    shutil.copytree(tmp_path / "step-00000002", temp_path_for(tmp_path / "step-00000005"))

    assert ckpt.latest() == tmp_path / "step-00000002"
    state = make_state(fabric, seed=2)
    state["note"] = "fresh"
    assert ckpt.resume(state) == 2
    assert torch.equal(weight(state), weight(saved)) and state["note"] == "seed 1"


def test_keep_last_prunes_only_complete_checkpoints_and_never_the_one_just_written(
    fabric: Fabric, tmp_path: Path
) -> None:
    ckpt = checkpoints(fabric, tmp_path, keep_last=2)
    state = make_state(fabric)
    incomplete = tmp_path / "step-00000001"
    incomplete.mkdir(parents=True)
    (incomplete / STATE).write_bytes(b"half")
    in_flight = temp_path_for(tmp_path / "step-00000009")  # this process is alive: a live writer's temp
    in_flight.mkdir()
    for step in (2, 3, 4, 5):
        ckpt.save(step, state)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([in_flight.name, "step-00000001", "step-00000004", "step-00000005"])
    # A stale higher step (from before a fallback) does not push out the checkpoint just written.
    shutil.copytree(tmp_path / "step-00000005", tmp_path / "step-00000090")
    json_marker = json.loads((tmp_path / "step-00000090" / MARKER).read_text())
    (tmp_path / "step-00000090" / MARKER).write_text(json.dumps({**json_marker, "step": 90}))
    ckpt.save(6, state)
    assert (tmp_path / "step-00000006" / MARKER).is_file() and (tmp_path / "step-00000090").is_dir()
    assert not (tmp_path / "step-00000005").exists() and incomplete.is_dir()


def test_a_flipped_byte_is_named_and_verify_falls_back_to_the_previous_checkpoint(
    fabric: Fabric, tmp_path: Path
) -> None:
    ckpt = checkpoints(fabric, tmp_path, verify=True)
    first = make_state(fabric, seed=1)
    ckpt.save(1, first)
    ckpt.save(2, make_state(fabric, seed=2))
    damaged = tmp_path / "step-00000002" / STATE
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))

    with pytest.raises(CheckpointError, match="step-00000002/state") as caught:
        check_digests(tmp_path / "step-00000002")
    assert caught.value.reason == "corrupt" and caught.value.path == os.fspath(damaged)

    state = make_state(fabric, seed=3)
    with pytest.warns(UserWarning, match=r"step-00000002/state.*is damaged"):
        assert ckpt.resume(state) == 1
    assert torch.equal(weight(state), weight(first))
    assert ckpt.latest() == tmp_path / "step-00000001"  # the damaged one is out of the way
    assert (tmp_path / "step-00000002.corrupt" / STATE).is_file()

    (tmp_path / "step-00000001" / STATE).write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match=r"No checkpoint .* passed its digest check.*step-00000001/state"):
        ckpt.resume(make_state(fabric))


@pytest.mark.parametrize("strategy", ["auto", "ddp"])
def test_resume_restores_the_torch_numpy_and_python_generators(tmp_path: Path, strategy: str) -> None:
    # ddp of one process gathers the states with a leading dimension where a single device does not.
    fabric = Fabric(accelerator="cpu", devices=1, strategy=strategy)
    fabric.launch()
    ckpt = checkpoints(fabric, tmp_path)
    state = make_state(fabric)
    torch.manual_seed(7)
    np.random.seed(7)
    random.seed(7)
    np.random.standard_normal()  # leaves a cached Gaussian in numpy's state
    ckpt.save(1, state)

    def draws() -> tuple[list[float], list[float], list[float]]:
        return torch.rand(3).tolist(), np.random.standard_normal(3).tolist(), [random.gauss(0, 1) for _ in range(3)]

    expected = draws()
    draws()
    assert ckpt.resume(state) == 1
    assert draws() == expected


def test_bad_arguments_are_refused_at_once_naming_the_value(fabric: Fabric, tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"keep_last=0"):
        checkpoints(fabric, tmp_path, keep_last=0)
    with pytest.raises(TypeError, match=r"every='10'"):
        checkpoints(fabric, tmp_path, every="10")
    with pytest.raises(InvalidConfigError, match=r"signals.*9"):
        RunCheckpoints(fabric, tmp_path, signals=(signal.SIGKILL,))
    ckpt = checkpoints(fabric, tmp_path)
    with pytest.raises(TypeError, match="expected a dict"):
        ckpt.save(1, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"step=-1"):
        ckpt.save(-1, {})
    with pytest.raises(TypeError, match=r"step=1.0"):
        ckpt.step_end(1.0, {})  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="rng_states"):
        ckpt.save(1, {"rng_states": 1})
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_signal_sets_a_flag_and_the_next_step_end_saves_and_exits_with_128_plus_its_number(
    fabric: Fabric, tmp_path: Path
) -> None:
    previous = signal.getsignal(signal.SIGUSR2)
    ckpt = RunCheckpoints(fabric, tmp_path, every=10, signals=(signal.SIGUSR2,))
    state = make_state(fabric)
    try:
        ckpt.step_end(1, state)
        assert not ckpt.preempted and ckpt.latest() is None
        os.kill(os.getpid(), signal.SIGUSR2)
        assert ckpt.preempted
        with pytest.raises(SystemExit) as exited:
            ckpt.step_end(3, state)
        assert exited.value.code == 128 + signal.SIGUSR2
        assert ckpt.latest() == tmp_path / "step-00000003"
    finally:
        ckpt.close()
    assert signal.getsignal(signal.SIGUSR2) == previous


def test_once_the_run_exits_on_a_signal_sigterm_is_ignored_so_that_it_cannot_replace_the_exit_code(
    fabric: Fabric, tmp_path: Path
) -> None:
    # `srun --kill-on-bad-exit` sends SIGTERM to the other tasks once the first has exited with 128 + signum;
    # a task killed by it would make srun exit with 143, which a wrapper waiting for 140 misses.
    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR2)}
    ckpt = RunCheckpoints(fabric, tmp_path, signals=(signal.SIGUSR2,))
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        with pytest.raises(SystemExit) as exited:
            ckpt.step_end(1, make_state(fabric))
        assert exited.value.code == 128 + signal.SIGUSR2
        assert signal.getsignal(signal.SIGTERM) == signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    finally:
        ckpt.close()
    assert {number: signal.getsignal(number) for number in before} == before  # close() puts both back


class SignalsWhileSaved:
    """A stateful entry whose ``state_dict()`` (called inside the save) signals this process."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def state_dict(self) -> dict[str, int]:
        os.kill(os.getpid(), self.signum)
        return {"saved": 1}

    def load_state_dict(self, state: dict[str, int]) -> None:
        pass


def test_a_signal_during_a_save_lets_the_save_finish_then_exits_after_the_commit(
    fabric: Fabric, tmp_path: Path
) -> None:
    ckpt = RunCheckpoints(fabric, tmp_path, signals=(signal.SIGUSR2,))
    state = {**make_state(fabric), "trigger": SignalsWhileSaved(signal.SIGUSR2)}
    try:
        with pytest.raises(SystemExit) as exited:
            ckpt.save(4, state)
    finally:
        ckpt.close()
    assert exited.value.code == 128 + signal.SIGUSR2
    assert ckpt.latest() == tmp_path / "step-00000004"  # committed, marker and all
    check_digests(tmp_path / "step-00000004")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004"]  # saved once, no temp left
