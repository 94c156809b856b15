"""Async checkpoints (`AsyncCheckpointIO`): snapshot, background write, waits, failures, and a real kill mid-write."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core import Fabric
from fabric_core.errors import CheckpointError
from fabric_core.io.async_io import AsyncCheckpointIO, snapshot_to_host
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.run_checkpoints import MARKER, RunCheckpoints, read_marker
from fabric_core.utilities.types import PathLike

JOB = Path(__file__).resolve().parents[1] / "_jobs" / "async_save_job.py"
DEADLINE_S = 25


class GatedIO(TorchCheckpointIO):
    """Writes only once the test opens the gate (or fails, when told to)."""

    def __init__(self, fail: BaseException | None = None) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.fail = fail

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None) -> None:
        assert self.gate.wait(DEADLINE_S)
        if self.fail is not None:
            raise self.fail
        super().save_checkpoint(checkpoint, path, storage_options)


def fabric_with(io: AsyncCheckpointIO) -> Fabric:
    return Fabric(accelerator="cpu", devices=1, plugins=[io])


def test_importable_from_lightning_path() -> None:
    from fabric_core.plugins.io import AsyncCheckpointIO as FromPlugins

    assert FromPlugins is AsyncCheckpointIO
    assert isinstance(fabric_with(AsyncCheckpointIO()).strategy.checkpoint_io, AsyncCheckpointIO)


def test_save_returns_before_the_write_and_writes_the_state_of_the_call(tmp_path: Path) -> None:
    inner = GatedIO()
    io = AsyncCheckpointIO(inner)
    fabric = fabric_with(io)
    model = torch.nn.Linear(4, 4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    path = tmp_path / "a.pt"
    fabric.save(path, {"model": model})
    assert io.pending and not path.exists()  # returned while the writer waits at the gate
    with torch.no_grad():
        model.weight.add_(1.0)  # an optimizer step after the save: not in the file
    inner.gate.set()
    io.wait()
    saved = torch.load(path)["model"]
    assert all(torch.equal(saved[k], before[k]) for k in before)
    assert not torch.equal(saved["weight"], model.weight.detach())


def test_snapshot_copies_and_keeps_views_shared() -> None:
    base = torch.arange(6.0)
    copied = snapshot_to_host({"a": base, "b": [base[2:4]], "n": 3})
    base.zero_()
    assert copied["a"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert copied["b"][0].tolist() == [2.0, 3.0] and copied["n"] == 3
    assert copied["a"].untyped_storage().data_ptr() == copied["b"][0].untyped_storage().data_ptr()
    assert copied["a"].untyped_storage().data_ptr() != base.untyped_storage().data_ptr()


def test_background_failure_surfaces_at_the_next_call_naming_the_path(tmp_path: Path) -> None:
    inner = GatedIO(fail=OSError(5, "Input/output error"))
    io = AsyncCheckpointIO(inner)
    fabric = fabric_with(io)
    model = torch.nn.Linear(2, 2)
    path = tmp_path / "broken.pt"
    fabric.save(path, {"model": model})
    inner.gate.set()
    with pytest.raises(CheckpointError, match=r"broken\.pt") as info:
        fabric.save(tmp_path / "next.pt", {"model": model})
    assert info.value.path == os.fspath(path) and isinstance(info.value.__cause__, OSError)
    assert not (tmp_path / "next.pt").exists()  # the failed call started nothing
    inner.fail = None
    fabric.save(tmp_path / "next.pt", {"model": model})  # raised once; the next call starts clean
    fabric.load(tmp_path / "next.pt", {"model": model})  # waits for the write before reading
    assert (tmp_path / "next.pt").exists()


def test_load_of_a_path_being_written_waits_for_it(tmp_path: Path) -> None:
    inner = GatedIO()
    io = AsyncCheckpointIO(inner)
    fabric = fabric_with(io)
    path = tmp_path / "c.pt"
    fabric.save(path, {"step": 7})
    threading.Timer(0.2, inner.gate.set).start()
    assert fabric.load(path) == {"step": 7}  # without the wait: FileNotFoundError


def test_run_checkpoint_is_committed_only_after_the_background_write(tmp_path: Path) -> None:
    inner = GatedIO()
    fabric = fabric_with(AsyncCheckpointIO(inner))
    model = torch.nn.Linear(3, 3)
    ckpt = RunCheckpoints(fabric, tmp_path / "run", keep_last=1, signals=())
    folder = ckpt.save(5, {"model": model})
    assert ckpt.latest() is None and not folder.exists()  # written, not committed: never chosen
    inner.gate.set()
    ckpt.wait()
    assert ckpt.latest() == folder and read_marker(folder) is not None
    assert (folder / MARKER).exists()
    ckpt.save(6, {"model": model})
    assert ckpt.resume({"model": model}) == 6  # resume waits for the pending commit, then prunes to 1
    assert [p.name for p in (tmp_path / "run").iterdir() if not p.name.startswith(".")] == ["step-00000006"]


def test_wrapping_a_non_checkpoint_io_is_refused() -> None:
    with pytest.raises(TypeError, match="expected a CheckpointIO"):
        AsyncCheckpointIO("torch")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a CheckpointIO"):
        AsyncCheckpointIO(AsyncCheckpointIO())


def _env() -> dict[str, str]:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "SLURM_", "MASTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _kill_mid_write(mode: str, directory: Path) -> str:
    """Run the job until its background writer has written its first bytes and `save` has returned; SIGKILL it."""
    job = subprocess.Popen(
        [sys.executable, os.fspath(JOB), mode, os.fspath(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=_env(),
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert job.stdout is not None
        for line in job.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    try:
        while not all(word in "".join(seen) for word in ("WRITING", "RETURNED")):  # two threads print them
            try:
                line = lines.get(timeout=DEADLINE_S)
            except queue.Empty:
                raise AssertionError(f"no sign of a background write in {DEADLINE_S} s: {''.join(seen)}") from None
            assert line is not None, "".join(seen)
            seen.append(line)
        os.killpg(job.pid, signal.SIGKILL)
        assert job.wait(timeout=DEADLINE_S) == -signal.SIGKILL
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    return "".join(seen)


@pytest.mark.multiprocess
@pytest.mark.kill_resume
def test_kill_during_the_background_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    _kill_mid_write("kill-run", tmp_path)
    _kill_mid_write("kill-plain", tmp_path)
    run = tmp_path / "run"
    committed = sorted(p.name for p in run.iterdir() if read_marker(p) is not None)
    assert committed == ["step-00000001"]  # step 2 was being written: never committed
    assert any(p.name.startswith(".step-00000002") for p in run.iterdir())  # its partial temp folder
    assert any(p.name.startswith(".plain.pt") for p in tmp_path.iterdir())  # the partial temp file
    assert torch.load(tmp_path / "plain.pt")["model"]["weight"].eq(1.0).all()  # the previous one, intact

    result = subprocess.run(
        [sys.executable, os.fspath(JOB), "resume", os.fspath(tmp_path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env=_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "plain 1.0" in result.stdout and "resumed 1 1.0" in result.stdout, result.stdout
    # The process exited right after starting both saves: the exit waited for them.
    assert torch.load(tmp_path / "plain.pt")["model"]["weight"].eq(3.0).all()
    names = sorted(p.name for p in run.iterdir())
    assert names == ["step-00000001", "step-00000003"]  # committed, and the killed save's temp swept
    assert read_marker(run / "step-00000003") is not None
    assert not any(p.name.startswith(".plain.pt") for p in tmp_path.iterdir())


def test_a_copy_sent_to_a_spawned_process_has_no_write_in_flight(tmp_path: Path) -> None:
    import pickle

    inner = TorchCheckpointIO()
    io = AsyncCheckpointIO(inner)
    io.save_checkpoint({"x": torch.ones(2)}, tmp_path / "x.pt")
    copy = pickle.loads(pickle.dumps(io))  # a pending write holds a thread and a lock: not picklable
    io.wait()
    assert not copy.pending and isinstance(copy.checkpoint_io, TorchCheckpointIO)
    copy.save_checkpoint({"x": torch.zeros(2)}, tmp_path / "y.pt")
    copy.wait()
    assert torch.load(tmp_path / "y.pt")["x"].eq(0).all()
