"""Checkpoints on fsspec filesystems: fabric.save/load and TorchCheckpointIO with memory:// URLs, Lightning's
cloud_io names, safe loads of remote files, and a failed upload that leaves the previous checkpoint."""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch
from fsspec.implementations.memory import MemoryFileSystem

from fabric_core import Fabric
from fabric_core.errors import CheckpointError, InvalidConfigError
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.utilities.cloud_io import _atomic_save, _load, get_filesystem, is_remote_url

lightning_cloud_io = pytest.importorskip("lightning_fabric.utilities.cloud_io")


@pytest.fixture
def root() -> Iterator[str]:
    """A fresh folder in fsspec's in-process memory filesystem, removed afterwards."""
    folder = f"memory://fabric-core-test-{uuid.uuid4().hex}"
    yield folder
    fs = fsspec.filesystem("memory")
    if fs.exists(folder):
        fs.rm(folder, recursive=True)


def test_get_filesystem_matches_lightning(root: str, tmp_path: Path) -> None:
    for path in (f"{root}/a.ckpt", str(tmp_path / "a.ckpt"), tmp_path):
        assert type(get_filesystem(path)) is type(lightning_cloud_io.get_filesystem(path))
    assert is_remote_url(f"{root}/a.ckpt") and not is_remote_url(tmp_path) and not is_remote_url("file:///tmp/x")


def test_fabric_save_and_load_through_a_memory_url(root: str) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    url = f"{root}/run/step-3.ckpt"
    fabric.save(url, {"model": model, "optimizer": optimizer, "step": 3})
    fs = fsspec.filesystem("memory")
    assert fs.ls(f"{root}/run", detail=False) == [url.removeprefix("memory:/")]  # no temp file left behind

    fresh = torch.nn.Linear(3, 2)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1)
    fresh, fresh_optimizer = fabric.setup(fresh, fresh_optimizer)
    state = {"model": fresh, "optimizer": fresh_optimizer, "step": 0}
    assert fabric.load(url, state) == {}
    assert state["step"] == 3
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)


def test_our_files_load_in_lightning_and_theirs_in_ours(root: str) -> None:
    checkpoint = {"w": torch.arange(6.0).reshape(2, 3), "epoch": 2}
    _atomic_save(checkpoint, f"{root}/ours.ckpt")
    theirs = lightning_cloud_io._load(f"{root}/ours.ckpt", weights_only=True)
    assert torch.equal(theirs["w"], checkpoint["w"]) and theirs["epoch"] == 2

    lightning_cloud_io._atomic_save(checkpoint, f"{root}/theirs.ckpt")
    ours = _load(f"{root}/theirs.ckpt")
    assert torch.equal(ours["w"], checkpoint["w"]) and ours["epoch"] == 2


class _Payload:
    """Unpickling this runs ``open(marker, "w")``: proof that loading executed code from the file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


def test_remote_load_refuses_code_by_default(root: str, tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    url = f"{root}/evil.ckpt"
    with fsspec.open(url, "wb") as file:
        torch.save({"model": _Payload(str(marker))}, file)
    for load in (lambda: TorchCheckpointIO().load_checkpoint(url), lambda: _load(url)):
        with pytest.raises(CheckpointError, match="refused") as err:
            load()
        assert err.value.reason == "unsafe"
    with pytest.raises(CheckpointError, match="refused"):
        Fabric(accelerator="cpu", devices=1).load(url)
    assert not marker.exists()


def test_remote_errors(root: str) -> None:
    io = TorchCheckpointIO()
    with pytest.raises(FileNotFoundError, match="not found"):
        io.load_checkpoint(f"{root}/missing.ckpt")
    fsspec.filesystem("memory").pipe_file(f"{root}/garbage.ckpt", b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=r"garbage\.ckpt.*not a PyTorch checkpoint"):
        io.load_checkpoint(f"{root}/garbage.ckpt")
    fsspec.filesystem("memory").pipe_file(f"{root}/folder/shard", b"x")
    with pytest.raises(CheckpointError, match="folder"):
        io.load_checkpoint(f"{root}/folder")
    with pytest.raises(InvalidConfigError, match="'nosuchproto'"):
        io.save_checkpoint({"a": 1}, "nosuchproto://x/y.ckpt")


def test_remove_checkpoint_on_a_url(root: str) -> None:
    io = TorchCheckpointIO()
    io.save_checkpoint({"a": 1}, f"{root}/c.ckpt")
    assert io.load_checkpoint(f"{root}/c.ckpt") == {"a": 1}
    io.remove_checkpoint(f"{root}/c.ckpt")
    io.remove_checkpoint(f"{root}/c.ckpt")  # missing is fine
    assert not fsspec.filesystem("memory").exists(f"{root}/c.ckpt")


def test_file_url_takes_the_local_atomic_path(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/sub/c.ckpt"
    TorchCheckpointIO().save_checkpoint({"a": torch.ones(2)}, url)
    assert os.listdir(tmp_path / "sub") == ["c.ckpt"]
    assert torch.equal(TorchCheckpointIO().load_checkpoint(url)["a"], torch.ones(2))


class _FailingUploadFS(MemoryFileSystem):
    """A memory filesystem whose uploads stop half-way, like a connection lost mid-transfer."""

    protocol = "failingmem"
    root_marker = "/"

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        super().pipe_file(path, value[: len(value) // 2], *args, **kwargs)
        raise ConnectionError("connection lost after half the bytes")


def test_failed_upload_keeps_the_previous_checkpoint_and_leaves_no_temp_file() -> None:
    fsspec.register_implementation("failingmem", _FailingUploadFS, clobber=True)
    folder = f"/failing-{uuid.uuid4().hex}"
    MemoryFileSystem().pipe_file(f"{folder}/c.ckpt", pickle.dumps("previous"))  # shares the memory store
    try:
        with pytest.raises(ConnectionError):
            TorchCheckpointIO().save_checkpoint({"w": torch.ones(100)}, f"failingmem://{folder}/c.ckpt")
        fs = MemoryFileSystem()
        assert fs.ls(folder, detail=False) == [f"{folder}/c.ckpt"]  # the half-written temp file is gone
        assert pickle.loads(fs.cat_file(f"{folder}/c.ckpt")) == "previous"
    finally:
        MemoryFileSystem().rm(folder, recursive=True)


_SLOW_WRITER = r"""
import sys, time
import fsspec, torch
from fsspec.implementations.local import LocalFileSystem
from fabric_core.io.torch_io import TorchCheckpointIO

class SlowLocal(LocalFileSystem):
    # A non-"file" protocol over the local disk whose uploads take a while, like a slow network store.
    protocol = "slowlocal"

    def pipe_file(self, path, value, **kwargs):
        with open(self._strip_protocol(path), "wb") as file:
            for start in range(0, len(value), 4096):
                file.write(value[start:start + 4096])
                file.flush()
                if start == 0:
                    print("writing", flush=True)
                time.sleep(0.01)

fsspec.register_implementation("slowlocal", SlowLocal, clobber=True)
TorchCheckpointIO().save_checkpoint({"w": torch.full((100_000,), float(sys.argv[2]))}, "slowlocal://" + sys.argv[1])
print("done", flush=True)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_killed_upload_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    target = tmp_path / "c.ckpt"

    def writer(value: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", _SLOW_WRITER, str(target), str(value)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    TorchCheckpointIO().save_checkpoint({"w": torch.full((100_000,), 1.0)}, target)  # the previous checkpoint

    second = writer(2)
    try:
        assert second.stdout is not None and second.stdout.readline().strip() == "writing"
        second.send_signal(signal.SIGKILL)  # mid-upload: about 400 KB of 4 KB chunks at 10 ms each
    finally:
        second.wait(timeout=30)
    assert second.returncode == -signal.SIGKILL
    loaded = TorchCheckpointIO().load_checkpoint(target)
    assert torch.equal(loaded["w"], torch.full((100_000,), 1.0))  # the previous checkpoint, whole
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "c.ckpt"]
    assert len(leftovers) == 1 and ".tmp-" in leftovers[0]  # the killed writer's partial temp file, never the target


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over HTTP on 127.0.0.1 for the test's duration."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_http_load_is_safe_by_default_where_lightnings_is_not(http_folder: tuple[Path, str], tmp_path: Path) -> None:
    folder, base = http_folder
    torch.save({"w": torch.ones(3)}, folder / "good.ckpt")
    assert torch.equal(_load(f"{base}/good.ckpt")["w"], torch.ones(3))

    marker = tmp_path / "executed"
    torch.save({"model": _Payload(str(marker))}, folder / "evil.ckpt")
    with pytest.raises(CheckpointError, match="refused") as err:
        _load(f"{base}/evil.ckpt")
    assert err.value.reason == "unsafe" and "http://127.0.0.1" in str(err.value)
    assert not marker.exists()
    _load(f"{base}/evil.ckpt", weights_only=False)  # the payload is live: trusted loading runs it
    assert marker.exists()
    with pytest.raises(FileNotFoundError, match="not found"):
        _load(f"{base}/missing.ckpt")
