"""A load racing a save of the same path reads exactly one checkpoint: never metadata of one, tensors of another."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fabric_core.errors import CheckpointError
from fabric_core.io import _file
from fabric_core.io.torch_io import TorchCheckpointIO

pytestmark = pytest.mark.soak

# Versions differ in the number of tensors and in their sizes, so that the records of one version lie at
# other offsets of the file than those of the next; every element of version v is v.
_VERSIONS = 6
_SAVER = r"""
import os, sys, time
from pathlib import Path
import torch
from fabric_core.io import torch_io
from fabric_core.io.torch_io import TorchCheckpointIO

target, stop, versions = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
io = TorchCheckpointIO()
deadline = time.monotonic() + 120  # ends by itself even if the test process is gone
saves = 0
while not stop.exists() and time.monotonic() < deadline:
    v = saves % versions + 1
    tensors = {f"w{i}": torch.full((2**10 + 256 * v * (i + 1),), float(v)) for i in range(8 + 8 * (v % 4))}
    io.save_checkpoint({"version": v, "shapes": {k: t.numel() for k, t in tensors.items()}, **tensors}, target)
    saves += 1
print(saves)
"""


def _check(loaded: dict[str, object]) -> str | None:
    """Why ``loaded`` is not one of the saved versions, or ``None`` when it is exactly one."""
    version = loaded["version"]
    shapes = loaded["shapes"]
    assert isinstance(version, int) and isinstance(shapes, dict)
    expected = {f"w{i}": 2**10 + 256 * version * (i + 1) for i in range(8 + 8 * (version % 4))}
    if shapes != expected or set(loaded) != {"version", "shapes", *expected}:
        return f"version {version}: keys {sorted(loaded)} / shapes {shapes}"
    for key, numel in expected.items():
        tensor = loaded[key]
        assert isinstance(tensor, torch.Tensor)
        if tensor.numel() != numel or not bool((tensor == version).all()):
            values = sorted({float(x) for x in tensor[:: max(1, numel // 5)]})
            return f"version {version}: {key} holds {values}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mmap", "descriptor_names", "seconds"),
    [(True, True, 30.0), (True, False, 8.0), (False, True, 5.0)],
    ids=["mapped", "mapped-without-proc-fd", "read"],
)
def test_loads_racing_a_saver_each_read_exactly_one_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mmap: bool, descriptor_names: bool, seconds: float
) -> None:
    # The mapped load (what fabric.load does for modules) is the one at risk; it gets the 30 s soak. Without
    # /proc/self/fd (macOS, Windows) it verifies the file's identity around the load instead.
    if not descriptor_names:
        monkeypatch.setattr(_file, "_FD_FOLDER", tmp_path / "no-such-folder")
    target, stop = tmp_path / "last.ckpt", tmp_path / "stop"
    saver = subprocess.Popen(
        [sys.executable, "-c", _SAVER, str(target), str(stop), str(_VERSIONS)], stdout=subprocess.PIPE, text=True
    )
    io = TorchCheckpointIO()
    loads, mixed, errors = 0, list[str](), list[str]()
    seen: set[int] = set()
    try:
        while not target.exists():
            assert saver.poll() is None, "the saver ended before its first save"
            time.sleep(0.01)
        # At least `seconds`, and on until the loads have seen every version (a busy machine saves slowly).
        end = time.monotonic() + seconds
        give_up = end + 60
        while time.monotonic() < end or (len(seen) < _VERSIONS and time.monotonic() < give_up):
            try:
                loaded = io.load_checkpoint(target, mmap=mmap)
            except (CheckpointError, RuntimeError, OSError) as err:  # a load must never see a damaged file
                errors.append(f"{type(err).__name__}: {err}"[:200])
                continue
            finally:
                loads += 1
            problem = _check(loaded)
            if problem is not None:
                mixed.append(problem)
            seen.add(int(loaded["version"]))
            del loaded
    finally:
        stop.touch()
        output, _ = saver.communicate(timeout=60)
    saves = int(output.strip() or 0)
    print(f"mmap={mmap}: {loads} loads racing {saves} saves: {len(mixed)} mixed, {len(errors)} errors")
    assert len(seen) == _VERSIONS, f"in {saves} saves, the loads saw only versions {sorted(seen)}"
    assert not mixed, f"{len(mixed)} of {loads} loads mixed checkpoints: {mixed[:3]}"
    assert not errors, f"{len(errors)} of {loads} loads failed: {errors[:3]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "stop"]
