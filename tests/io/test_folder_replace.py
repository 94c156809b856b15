"""Replacing a checkpoint folder in one step: never nothing at the path, and no leftovers after the next save."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fabric_core.errors import CheckpointError
from fabric_core.io import folder as reading
from fabric_core.io import replace
from fabric_core.io.atomic import atomic_write, committed_path, remove_stale_temps, replace_path, temp_path_for
from fabric_core.io.distributed import load_distributed_checkpoint
from fabric_core.io.temp_names import OLD_SUFFIX, _host_tag
from fabric_core.io.torch_io import TorchCheckpointIO

needs_exchange = pytest.mark.skipif(replace._renameat2 is None, reason="renameat2(RENAME_EXCHANGE) is Linux only")


def _folder(path: Path, content: str) -> Path:
    """A stand-in checkpoint folder: ``meta.pt`` marks it as one (a folder of other files is never replaced)."""
    path.mkdir()
    (path / "meta.pt").write_bytes(b"")
    (path / "data").write_text(content)
    return path


def _write_temp_folder(target: Path, content: str) -> Path:
    return _folder(temp_path_for(target), content)


@pytest.fixture(params=["exchange", "two-renames"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "exchange" and replace._renameat2 is None:
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux only")
    if request.param == "two-renames":
        monkeypatch.setattr(replace, "_renameat2", None)  # as on a system or filesystem that cannot swap names
    return str(request.param)


def test_a_folder_replaces_a_folder_a_file_and_nothing(tmp_path: Path, mode: str) -> None:
    target = tmp_path / "ckpt"
    replace_path(_write_temp_folder(target, "1"), target)  # nothing there yet
    assert (target / "data").read_text() == "1"
    replace_path(_write_temp_folder(target, "2"), target)  # a folder there
    assert (target / "data").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    file_target = tmp_path / "last.ckpt"
    file_target.write_text("a full checkpoint")
    replace_path(_write_temp_folder(file_target, "3"), file_target)  # a file there
    assert (file_target / "data").read_text() == "3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "last.ckpt"]


def test_a_file_saved_over_a_sharded_folder_replaces_it_in_one_step(tmp_path: Path, mode: str) -> None:
    target = _folder(tmp_path / "ckpt", "sharded")
    with atomic_write(target) as file:
        file.write(b"full")
    assert target.read_bytes() == b"full"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_folder_of_other_files_is_never_replaced_by_a_checkpoint(tmp_path: Path) -> None:
    from fabric_core.errors import FolderInTheWayError

    target = tmp_path / "runs"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(FolderInTheWayError, match=r"holds other files \('notes.txt'\), not a checkpoint") as info:
        TorchCheckpointIO().save_checkpoint({"step": 1}, target)
    assert isinstance(info.value, FileExistsError)
    with pytest.raises(FolderInTheWayError):
        replace_path(_write_temp_folder(target, "new"), target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["runs"]
    target.joinpath("notes.txt").unlink()  # an empty folder is nothing to lose
    TorchCheckpointIO().save_checkpoint({"step": 1}, target)
    assert target.is_file()


@needs_exchange
def test_the_swap_leaves_the_previous_folder_under_the_temp_name_only_until_it_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _folder(tmp_path / "ckpt", "old")
    new = _write_temp_folder(target, "new")
    seen: list[str] = []
    monkeypatch.setattr(replace, "_remove", lambda path: seen.append((Path(path) / "data").read_text()))
    replace_path(new, target)
    assert seen == ["old"]  # what is removed after the swap is the previous checkpoint, under the temp name
    assert (target / "data").read_text() == "new"


def test_a_reader_finds_the_previous_folder_between_the_two_renames(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    assert committed_path(target) == target  # nothing anywhere: the path itself (and FileNotFoundError later)
    old = _folder(temp_path_for(target, OLD_SUFFIX), "old")
    assert committed_path(target) == old
    _folder(target, "new")
    assert committed_path(target) == target


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _name_of(target: Path, pid: int, suffix: str, host: str | None = None) -> Path:
    return target.parent / f".{target.name}.{host or _host_tag()}-{pid}-{'ab' * 6}{suffix}"


def test_the_next_save_sweeps_leftovers_of_dead_writers_of_this_path_only(tmp_path: Path) -> None:
    target = _folder(tmp_path / "ckpt", "committed")
    dead, alive = _dead_pid(), os.getpid()
    gone = [_folder(_name_of(target, dead, ".tmp"), "x"), _folder(_name_of(target, dead, ".old"), "x")]
    kept = [
        _folder(_name_of(target, alive, ".tmp"), "a save in progress"),
        _folder(_name_of(target, dead, ".tmp", host="otherhost"), "another host's save"),
        _folder(_name_of(tmp_path / "ckpt.b", dead, ".tmp"), "another path's"),
        _folder(tmp_path / f".ckpt.{_host_tag()}-{dead}-notrandom.tmp", "not our naming"),
    ]
    assert sorted(remove_stale_temps(target)) == sorted(gone)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in gone)
    assert (target / "data").read_text() == "committed"


def test_a_sweep_puts_back_the_committed_folder_a_killed_writer_left_under_its_old_name(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    dead = _dead_pid()
    older = _folder(_name_of(target, dead, ".old").with_name(f".ckpt.{_host_tag()}-{dead}-{'cd' * 6}.old"), "1")
    time.sleep(0.01)
    _folder(_name_of(target, dead, ".old"), "2")  # renamed last: the one committed when the writer was killed
    remove_stale_temps(target)
    assert (target / "data").read_text() == "2"
    assert not older.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


# A process with torch imported that forks one saver per round: each saver writes sharded checkpoints
# (torch.distributed.checkpoint files and meta.pt, every tensor filled with the version) to a temp folder and
# replaces the path with it, in a loop, until the test kills it with SIGKILL. Forking spares a torch import per
# kill. The steps of the replace are widened a little (sleeps around them) so that random kills also land
# between them; they still run as they do in a save.
_SAVERS = r"""
import os, signal, sys, time
from pathlib import Path
import torch
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from fabric_core.errors import CheckpointError
from fabric_core.io import folder as reading
from fabric_core.io import atomic, replace
from fabric_core.io.torch_io import TorchCheckpointIO

torch.set_num_threads(1)
target, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "two-renames":
    replace._renameat2 = None
real_rename, real_remove = os.rename, replace._remove
def slow_rename(*args, **kwargs):
    real_rename(*args, **kwargs)
    time.sleep(0.02)
def slow_remove(path):
    time.sleep(0.02)
    real_remove(path)
os.rename, replace._remove = slow_rename, slow_remove
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # killed savers are reaped at once: their pids are gone

def save(version):
    atomic.remove_stale_temps(target)
    temp = atomic.temp_path_for(target)
    tensors = {f"w{i}": torch.full((2**15 * (1 + version % 3),), float(version)) for i in range(1 + version % 4)}
    dcp_save({"model": tensors}, checkpoint_id=temp, no_dist=True)
    TorchCheckpointIO().save_checkpoint({"version": version}, temp / "meta.pt")
    atomic.replace_path(temp, target)

save(0)
started = time.monotonic()
save(1)
print(time.monotonic() - started, flush=True)
deadline = time.monotonic() + 120  # ends by itself if the test process is gone
for line in sys.stdin:
    first = int(line)
    if os.fork() == 0:
        atomic.remove_stale_temps(target)  # what the first save does first; then the test starts its clock
        print(os.getpid(), flush=True)
        version = first
        while time.monotonic() < deadline:
            save(version)
            version += 1
        os._exit(0)
"""


def _gone(pid: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.005)
    raise AssertionError(f"killed saver {pid} still exists")


def _mixed(loaded: dict[str, Any]) -> str | None:
    """Why ``loaded`` is not exactly one checkpoint of ``_SAVERS``, or ``None`` when it is one."""
    if "version" not in loaded or "model" not in loaded:
        return f"keys {sorted(loaded)}: meta.pt or the tensors of another checkpoint"
    version = loaded["version"]
    tensors = loaded["model"]
    if set(tensors) != {f"w{i}" for i in range(1 + version % 4)}:
        return f"version {version} (meta.pt) with tensors {sorted(tensors)}"
    for name, tensor in tensors.items():
        if tensor.numel() != 2**15 * (1 + version % 3) or not bool((tensor == version).all()):
            values = sorted(set(tensor[::4096].tolist()))
            return f"version {version} (meta.pt) with {name} of {tensor.numel()} holding {values}"
    return None


def _check_committed(target: Path) -> int:
    """Load the checkpoint at ``target`` whole; return its version after checking every tensor holds it."""
    loaded = TorchCheckpointIO().load_checkpoint(target)
    problem = _mixed(loaded)
    assert problem is None, problem
    return int(loaded["version"])


def _older_leftover(path: Path, version: int) -> bool:
    try:
        return bool(TorchCheckpointIO().load_checkpoint(path / "meta.pt")["version"] < version)
    except (CheckpointError, OSError, ValueError, RuntimeError):  # a temp being written, or removed part-way
        return False


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exchange", "two-renames"])
@pytest.mark.soak
def test_savers_killed_at_random_points_never_lose_the_checkpoint(tmp_path: Path, mode: str) -> None:
    if mode == "exchange" and replace._renameat2 is None:
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux only")
    target, kills = tmp_path / "ckpt", 24
    savers = subprocess.Popen(
        [sys.executable, "-c", _SAVERS, str(target), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert savers.stdin is not None and savers.stdout is not None
    rng = random.Random(14)
    lost, between, versions = 0, 0, set()
    try:
        save_seconds = float(savers.stdout.readline())
        for kill in range(kills):
            savers.stdin.write(f"{1000 * (kill + 1)}\n")
            savers.stdin.flush()
            pid = int(savers.stdout.readline())
            # Spread over about three whole saves (each starts with a sweep).
            time.sleep(rng.uniform(0.0, 3 * save_seconds))
            os.kill(pid, signal.SIGKILL)
            _gone(pid)
            left = sorted(p.name for p in tmp_path.iterdir() if p.name != "ckpt")
            if not committed_path(target).exists():
                lost += 1
                continue
            version = _check_committed(target)
            versions.add(version)
            # Between the two steps of a replace: the path missing and the previous checkpoint under its old
            # name (two renames), or the previous one, older than the path's, under the temp name (swap).
            between += not target.exists() or any(_older_leftover(tmp_path / name, version) for name in left)
            # Whatever earlier savers left was swept by this one: only its own names can remain.
            assert all(f"-{pid}-" in name for name in left), (pid, left)
    finally:
        savers.kill()
        savers.communicate(timeout=30)
    print(f"{mode}: {kills} kills, {lost} checkpoints lost, {between} between the two steps, {len(versions)} versions")
    assert lost == 0
    assert len(versions) > 2, "the savers were killed before they replaced the checkpoint"
    # The next save (here, in this process) puts back or sweeps whatever the last kill left.
    remove_stale_temps(target)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert _check_committed(target) >= 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "descriptor_names", "seconds"),
    [("exchange", True, 20.0), ("two-renames", True, 6.0), ("exchange", False, 5.0)],
    ids=["exchange", "two-renames", "exchange-without-proc-fd"],
)
@pytest.mark.soak
def test_loads_racing_folder_replaces_each_read_exactly_one_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, descriptor_names: bool, seconds: float
) -> None:
    # A real saver process replaces the sharded folder in a loop (versions differ in tensor count and size,
    # every element holds the version, meta.pt names it) while this process loads it whole again and again.
    # Without /proc/self/fd (macOS) the files are read by path and the folder's identity is checked after.
    if mode == "exchange" and replace._renameat2 is None:
        pytest.skip("renameat2(RENAME_EXCHANGE) is Linux only")
    if not descriptor_names:
        monkeypatch.setattr(reading, "_FD_FOLDER", tmp_path / "no-such-folder")
    target = tmp_path / "ckpt"
    savers = subprocess.Popen(
        [sys.executable, "-c", _SAVERS, str(target), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert savers.stdin is not None and savers.stdout is not None
    loads, mixed, errors, versions = 0, list[str](), list[str](), set[int]()
    saver = 0
    try:
        savers.stdout.readline()
        savers.stdin.write("1000\n")
        savers.stdin.flush()
        saver = int(savers.stdout.readline())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            loads += 1
            try:
                loaded = load_distributed_checkpoint(target)
            except (CheckpointError, OSError, RuntimeError, ValueError) as err:  # never a damaged or missing folder
                errors.append(f"{type(err).__name__}: {err}"[:300])
                continue
            problem = _mixed(loaded)
            if problem is not None:
                mixed.append(problem)
                continue
            versions.add(int(loaded["version"]))
    finally:
        if saver:
            os.kill(saver, signal.SIGKILL)
        savers.kill()
        savers.communicate(timeout=30)
    print(f"{mode}: {loads} loads racing folder replaces, {len(versions)} versions: {len(mixed)} mixed, ", end="")
    print(f"{len(errors)} errors")
    assert len(versions) > 10, f"the loads saw only versions {sorted(versions)}: the saver hardly ran"
    assert not mixed, f"{len(mixed)} of {loads} loads mixed checkpoints: {mixed[:3]}"
    assert not errors, f"{len(errors)} of {loads} loads failed: {errors[:3]}"


def test_a_folder_replaced_under_every_read_is_an_error_not_a_mix(tmp_path: Path) -> None:
    target = _folder(tmp_path / "ckpt", "1")
    reads = 0

    def read_then_lose_a_file(folder: reading.OpenFolder) -> str:
        nonlocal reads
        reads += 1
        replace_path(_write_temp_folder(target, str(reads + 1)), target)  # another process's save
        return (folder.root / "data").read_text()  # the opened folder was deleted: the file is gone

    with pytest.raises(CheckpointError, match=f"replaced by another process during each of {reading.ATTEMPTS}"):
        reading.read_one_folder(target, read_then_lose_a_file)
    assert reads == reading.ATTEMPTS
    # A file missing from a folder nobody replaced is not retried: the error names it.
    with pytest.raises(FileNotFoundError, match="missing"):
        reading.read_one_folder(target, lambda folder: (folder.root / "missing").read_text())
