"""TorchCheckpointIO and atomic_write: atomic saves (even under SIGKILL), safe loads, clear errors."""

from __future__ import annotations

import fractions
import gc
import importlib.util
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io.atomic import remove_stale_temps, temp_path_for
from fabric_core.io.torch_io import TorchCheckpointIO, atomic_write

REPO_ROOT = Path(__file__).resolve().parents[2]


class _RunsShellOnLoad:
    """Unpickling this calls os.system: what a malicious checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


class _HarmlessReduce:
    """Unpickling this builds a Fraction: arbitrary code in form, harmless in effect."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (fractions.Fraction, (1, 3))


def _temps(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".tmp"))


def _trained_state() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


# -- round trip ---------------------------------------------------------------------------------------


def test_round_trip_of_model_optimizer_and_plain_values(tmp_path: Path) -> None:
    model, optimizer = _trained_state()
    io = TorchCheckpointIO()
    plain = {"step": 7, "lr": 0.5, "name": "run", "flags": [True, None], "nested": {"a": (1, 2)}}
    io.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(), **plain}, tmp_path / "c.pt")

    loaded = io.load_checkpoint(tmp_path / "c.pt")

    assert {k: loaded[k] for k in plain} == plain
    fresh_model = torch.nn.Linear(3, 2)
    fresh_model.load_state_dict(loaded["model"])
    for a, b in zip(model.parameters(), fresh_model.parameters(), strict=True):
        assert torch.equal(a, b)
    fresh_optimizer = torch.optim.Adam(fresh_model.parameters(), lr=0.1)
    fresh_optimizer.load_state_dict(loaded["optimizer"])
    assert torch.equal(
        fresh_optimizer.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )


def test_save_creates_missing_parent_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.pt"
    TorchCheckpointIO().save_checkpoint({"x": torch.ones(2)}, target)
    assert torch.equal(TorchCheckpointIO().load_checkpoint(target)["x"], torch.ones(2))


def test_save_replaces_an_existing_checkpoint_and_leaves_no_temp(tmp_path: Path) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint({"v": 1}, tmp_path / "c.pt")
    io.save_checkpoint({"v": 2}, tmp_path / "c.pt")
    assert io.load_checkpoint(tmp_path / "c.pt") == {"v": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_save_accepts_a_string_path(tmp_path: Path) -> None:
    TorchCheckpointIO().save_checkpoint({"v": 1}, str(tmp_path / "c.pt"))
    assert TorchCheckpointIO().load_checkpoint(str(tmp_path / "c.pt")) == {"v": 1}


def test_load_puts_tensors_on_cpu_by_default_and_honours_map_location(tmp_path: Path) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint({"x": torch.ones(2)}, tmp_path / "c.pt")
    assert io.load_checkpoint(tmp_path / "c.pt")["x"].device == torch.device("cpu")
    assert io.load_checkpoint(tmp_path / "c.pt", map_location="meta")["x"].device == torch.device("meta")


def test_new_file_permissions_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        TorchCheckpointIO().save_checkpoint({"v": 1}, tmp_path / "c.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "c.pt").stat().st_mode) == 0o640


# -- arguments ------------------------------------------------------------------------------------------


def test_storage_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="storage_options"):
        TorchCheckpointIO().save_checkpoint({"v": 1}, tmp_path / "c.pt", storage_options={"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_url_without_its_filesystem_package_is_a_clear_error() -> None:
    # s3fs is a test dependency (the object-storage tests): a protocol whose package is not installed here.
    missing = [(p, m) for p, m in (("gs", "gcsfs"), ("az", "adlfs"), ("s3", "s3fs")) if not importlib.util.find_spec(m)]
    if not missing:
        pytest.skip("gcsfs, adlfs and s3fs are all installed")
    protocol, package = missing[0]
    with pytest.raises(InvalidConfigError, match=rf"'{protocol}'.*{protocol}://bucket/c\.pt.*pip install {package}"):
        TorchCheckpointIO().save_checkpoint({"v": 1}, f"{protocol}://bucket/c.pt")


def test_missing_checkpoint_raises_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pt"
    with pytest.raises(FileNotFoundError, match=f"Checkpoint file not found: {missing}"):
        TorchCheckpointIO().load_checkpoint(missing)


def test_loading_a_plain_folder_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is a folder but not a sharded checkpoint"):
        TorchCheckpointIO().load_checkpoint(tmp_path)


# -- failures part-way ----------------------------------------------------------------------------------


def test_exception_during_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint({"v": "old"}, tmp_path / "c.pt")

    class Unpicklable:
        def __reduce__(self) -> tuple[Any, ...]:
            raise RuntimeError("cannot pickle this")

    with pytest.raises(RuntimeError, match="cannot pickle"):
        io.save_checkpoint({"big": torch.ones(1000), "bad": Unpicklable()}, tmp_path / "c.pt")
    assert io.load_checkpoint(tmp_path / "c.pt") == {"v": "old"}
    assert _temps(tmp_path) == []


def test_atomic_write_removes_its_temp_and_keeps_the_target_when_the_block_raises(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_write(target) as file:
        file.write(b"half of the new cont")
        assert len(_temps(tmp_path)) == 1
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert _temps(tmp_path) == []


def test_atomic_write_writes_through_a_hidden_temp_in_the_same_folder(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    with atomic_write(target) as file:
        file.write(b"new")
        (temp,) = _temps(tmp_path)
        assert temp.parent == tmp_path
        assert temp.name.startswith(".f.bin.")
        assert not target.exists()
    assert target.read_bytes() == b"new"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def test_stale_temps_of_dead_writers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    target = tmp_path / "c.pt"
    ours = temp_path_for(target)
    host, _, token = ours.name[len(".c.pt.") : -len(".tmp")].split("-")
    dead = tmp_path / f".c.pt.{host}-{_dead_pid()}-{token}.tmp"
    live = tmp_path / f".c.pt.{host}-{os.getppid()}-{token}.tmp"
    elsewhere = tmp_path / f".c.pt.otherhost-{_dead_pid()}-{token}.tmp"
    other_target = tmp_path / f".d.pt.{host}-{_dead_pid()}-{token}.tmp"
    for path in (dead, live, elsewhere, other_target):
        path.write_bytes(b"partial")

    TorchCheckpointIO().save_checkpoint({"v": 1}, target)

    assert not dead.exists()
    assert live.exists() and elsewhere.exists() and other_target.exists()
    assert remove_stale_temps(target) == []


def _kill_during_save(folder: Path, target: Path, numel: int) -> tuple[int, int]:
    """Start a process that saves a large checkpoint over ``target``; SIGKILL it once its temp file grows.

    Returns the child's exit status and the size its temp file had reached.
    """
    code = (
        "import os, sys, torch\n"
        "os.nice(19)  # let the parent, which watches the temp file, win the CPU\n"
        "from fabric_core.io.torch_io import TorchCheckpointIO\n"
        f"big = torch.full(({numel},), 7.0)\n"
        "TorchCheckpointIO().save_checkpoint({'weights': big, 'version': 'new'}, sys.argv[1])\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], env=env)
    grown = 0
    deadline = time.monotonic() + 40
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            temps = _temps(folder)
            if temps:
                try:
                    grown = temps[0].stat().st_size
                except FileNotFoundError:
                    grown = 0
                if grown >= 4 * 2**20:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
            time.sleep(0.001)  # a poll interval, not a wait for an outcome
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
        returncode = proc.wait(timeout=30)
    return returncode, grown


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_save_killed_part_way_leaves_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    io = TorchCheckpointIO()
    target = tmp_path / "last.pt"
    old: dict[str, Any] = {"weights": torch.arange(10.0), "version": "old"}
    io.save_checkpoint(old, target)

    # A 200 MB tensor takes a fraction of a second to write; in the rare case the child still wins the
    # race and finishes, try again rather than test nothing.
    for _ in range(3):
        returncode, grown = _kill_during_save(tmp_path, target, numel=50 * 2**20)
        if returncode == -signal.SIGKILL:
            break
        io.save_checkpoint(old, target)
    assert returncode == -signal.SIGKILL, "the saving process finished before it could be killed"
    assert grown >= 4 * 2**20

    loaded = io.load_checkpoint(target)
    assert loaded["version"] == "old"
    assert torch.equal(loaded["weights"], old["weights"])
    # The killed writer's temp stays behind, hidden: it matches neither the target nor a `*.pt` glob.
    (stale,) = _temps(tmp_path)
    assert stale.name.startswith(".last.pt.")
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["last.pt"]
    # The next save on this host removes it.
    io.save_checkpoint({"version": "next"}, target)
    assert _temps(tmp_path) == []
    assert io.load_checkpoint(target) == {"version": "next"}


# -- damaged and foreign files --------------------------------------------------------------------------


def test_truncated_checkpoint_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    TorchCheckpointIO().save_checkpoint({"w": torch.randn(1000)}, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or is not a PyTorch checkpoint") as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert str(path) in str(info.value)
    assert info.value.reason == "corrupt"
    assert info.value.path == str(path)


def test_truncated_legacy_format_checkpoint_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    torch.save({"w": torch.randn(100)}, path, _use_new_zipfile_serialization=False)
    assert TorchCheckpointIO().load_checkpoint(path)["w"].shape == (100,)
    path.write_bytes(path.read_bytes()[:-300])
    with pytest.raises(CheckpointError, match="truncated"):
        TorchCheckpointIO().load_checkpoint(path)


@pytest.mark.parametrize("content", [os.urandom(4096), b"", b"epoch,loss\n1,0.5\n"], ids=["random", "empty", "csv"])
@pytest.mark.parametrize("weights_only", [None, False])
def test_foreign_file_gives_a_clear_error(tmp_path: Path, content: bytes, weights_only: bool | None) -> None:
    path = tmp_path / "c.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="truncated or is not a PyTorch checkpoint") as info:
        TorchCheckpointIO().load_checkpoint(path, weights_only=weights_only)
    assert str(path) in str(info.value)


def test_a_zip_that_is_not_a_checkpoint_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes/readme.txt", "hello")
    with pytest.raises(CheckpointError, match="not a PyTorch checkpoint"):
        TorchCheckpointIO().load_checkpoint(path)


# -- weights_only ---------------------------------------------------------------------------------------


def test_checkpoint_that_would_run_code_is_refused_by_default(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    TorchCheckpointIO().save_checkpoint({"w": torch.ones(1), "payload": _RunsShellOnLoad(marker)}, path)

    with pytest.raises(CheckpointError, match=r"weights_only=False") as info:
        TorchCheckpointIO().load_checkpoint(path)
    assert info.value.reason == "unsafe"
    assert "posix.system" in str(info.value) or "nt.system" in str(info.value)
    assert "trust" in str(info.value)
    assert not marker.exists()

    with pytest.raises(CheckpointError):
        TorchCheckpointIO().load_checkpoint(path, weights_only=True)
    assert not marker.exists()


def test_weights_only_false_loads_arbitrary_objects(tmp_path: Path) -> None:
    path = tmp_path / "objects.pt"
    TorchCheckpointIO().save_checkpoint({"w": torch.ones(1), "obj": _HarmlessReduce()}, path)

    with pytest.raises(CheckpointError, match=r"fractions\.Fraction"):
        TorchCheckpointIO().load_checkpoint(path)
    loaded = TorchCheckpointIO().load_checkpoint(path, weights_only=False)
    assert loaded["obj"] == fractions.Fraction(1, 3)


def test_allowlisted_classes_load_with_weights_only(tmp_path: Path) -> None:
    path = tmp_path / "objects.pt"
    TorchCheckpointIO().save_checkpoint({"obj": fractions.Fraction(2, 5)}, path)
    with torch.serialization.safe_globals([fractions.Fraction]):
        assert TorchCheckpointIO().load_checkpoint(path)["obj"] == fractions.Fraction(2, 5)


# -- remove ---------------------------------------------------------------------------------------------


def test_remove_checkpoint_file_folder_and_missing(tmp_path: Path) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint({"v": 1}, tmp_path / "c.pt")
    io.save_checkpoint({"v": 1}, tmp_path / "sharded" / "part0.pt")
    io.remove_checkpoint(tmp_path / "c.pt")
    io.remove_checkpoint(tmp_path / "sharded")
    io.remove_checkpoint(tmp_path / "never-existed.pt")
    assert list(tmp_path.iterdir()) == []


def _zip_crc_errors(path: Path) -> str | None:
    with zipfile.ZipFile(path) as archive:
        return archive.testzip()  # the first record whose CRC32 does not match, or None


def test_saves_leave_out_zip_crc32s_and_still_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    weights = torch.randn(64, 64)
    TorchCheckpointIO().save_checkpoint({"w": weights}, path)
    assert _zip_crc_errors(path) is not None  # written as zero: torch.load never checks them
    assert torch.equal(TorchCheckpointIO().load_checkpoint(path)["w"], weights)
    assert torch.serialization.get_crc32_options() is True  # torch's own setting is back


def test_zip_crc32_true_writes_verifiable_archives(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    io = TorchCheckpointIO(zip_crc32=True)
    assert repr(io) == "TorchCheckpointIO(zip_crc32=True)"
    io.save_checkpoint({"w": torch.randn(64, 64)}, path)
    assert _zip_crc_errors(path) is None


def test_saves_in_several_threads_each_leave_out_crcs_and_restore_the_setting(tmp_path: Path) -> None:
    import threading

    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    class Slow:
        """Pickled inside torch.save: holds every thread's save open until all three are in."""

        def __reduce__(self) -> tuple[Any, ...]:
            barrier.wait(timeout=30)
            return (int, (0,))

    def save(index: int) -> None:
        try:
            TorchCheckpointIO().save_checkpoint({"slow": Slow(), "w": torch.ones(8)}, tmp_path / f"{index}.pt")
        except BaseException as err:  # reported below: a thread's exception would be lost
            errors.append(err)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert torch.serialization.get_crc32_options() is True
    assert all(_zip_crc_errors(tmp_path / f"{i}.pt") is not None for i in range(3))


def test_a_subclass_that_skips_the_base_init_still_saves(tmp_path: Path) -> None:
    class OwnInit(TorchCheckpointIO):
        def __init__(self) -> None:  # does not call super().__init__()
            self.note = "mine"

    OwnInit().save_checkpoint({"w": torch.ones(2)}, tmp_path / "ckpt.pt")
    assert torch.equal(TorchCheckpointIO().load_checkpoint(tmp_path / "ckpt.pt")["w"], torch.ones(2))


def _mapped_files() -> str:
    return Path("/proc/self/maps").read_text()


requires_proc_maps = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps (Linux)")


@requires_proc_maps
def test_mmap_load_maps_the_file_until_the_tensors_are_gone(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    TorchCheckpointIO().save_checkpoint({"w": torch.arange(1000.0), "n": 3}, path)
    loaded = TorchCheckpointIO().load_checkpoint(path, mmap=True)
    assert torch.equal(loaded["w"], torch.arange(1000.0))
    assert loaded["n"] == 3
    assert str(path) in _mapped_files()
    del loaded
    gc.collect()
    assert str(path) not in _mapped_files()
    read = TorchCheckpointIO().load_checkpoint(path)  # the default reads the file into memory
    assert torch.equal(read["w"], torch.arange(1000.0))
    assert str(path) not in _mapped_files()


def test_mmap_load_reads_legacy_files(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.arange(10.0)}, path, _use_new_zipfile_serialization=False)
    assert torch.equal(TorchCheckpointIO().load_checkpoint(path, mmap=True)["w"], torch.arange(10.0))


def test_a_file_that_cannot_be_mapped_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Some network filesystems refuse mmap; torch then fails in `UntypedStorage.from_file` with this message.
    def refuse(filename: str, shared: bool, nbytes: int) -> Any:
        raise RuntimeError(f"unable to mmap {nbytes} bytes from file <{filename}>: No such device (19)")

    path = tmp_path / "c.pt"
    TorchCheckpointIO().save_checkpoint({"w": torch.arange(10.0)}, path)
    monkeypatch.setattr(torch.UntypedStorage, "from_file", refuse)
    with pytest.raises(RuntimeError, match="unable to mmap"):
        torch.load(path, mmap=True)
    assert torch.equal(TorchCheckpointIO().load_checkpoint(path, mmap=True)["w"], torch.arange(10.0))


def test_a_truncated_file_is_a_checkpoint_error_with_mmap_too(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    TorchCheckpointIO().save_checkpoint({"w": torch.randn(1000)}, path)
    path.write_bytes(path.read_bytes()[:-300])
    with pytest.raises(CheckpointError, match="truncated") as info:
        TorchCheckpointIO().load_checkpoint(path, mmap=True)
    assert info.value.reason == "corrupt"


def test_a_users_checkpoint_io_receives_its_arguments_by_keyword(tmp_path: Path) -> None:
    # Lightning's strategies call `save_checkpoint(checkpoint=..., path=..., storage_options=...)`: a CheckpointIO
    # written against that (keyword-only parameters, or other parameter names in the middle) works here too.
    from fabric_core import Fabric
    from fabric_core.io.checkpoint_io import CheckpointIO

    class KeywordsOnly(CheckpointIO):
        saved: list[tuple[Any, Any]] = []

        def save_checkpoint(self, *, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:  # type: ignore[override]
            self.saved.append((sorted(checkpoint), Path(path).name))

        def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> Any:
            raise NotImplementedError

        def remove_checkpoint(self, path: Any) -> None:
            raise NotImplementedError

    io = KeywordsOnly()
    fabric = Fabric(accelerator="cpu", devices=1, plugins=[io])
    fabric.save(tmp_path / "state.ckpt", {"step": 3, "note": "x"})
    assert io.saved == [(["note", "step"], "state.ckpt")]
