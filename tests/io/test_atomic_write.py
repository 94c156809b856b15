"""atomic_write replacing a large file: the old file's blocks are freed off the caller's thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fabric_core.io import atomic, remover
from fabric_core.io.atomic import atomic_write, wait_for_removals


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> int:
    # Real files, but "large" starts at 1 MiB so that the test writes little.
    monkeypatch.setattr(remover, "BACKGROUND_REMOVAL_BYTES", 2**20)
    return 2**20


def _write(path: Path, content: bytes) -> None:
    with atomic_write(path) as file:
        file.write(content)


def test_a_large_replaced_file_is_removed_in_the_background_and_nothing_is_left(
    tmp_path: Path, small_threshold: int
) -> None:
    target = tmp_path / "last.ckpt"
    old = b"o" * (2 * small_threshold)
    _write(target, old)
    with open(target, "rb") as reader:  # a reader of the old file keeps reading it whole
        _write(target, b"new")
        assert target.read_bytes() == b"new"
        wait_for_removals()
        assert reader.read() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_the_removal_runs_on_another_thread(
    tmp_path: Path, small_threshold: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "last.ckpt"
    _write(target, b"o" * small_threshold)
    removed_by: list[str] = []
    real_unlink = os.unlink

    def recording_unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        removed_by.append(threading.current_thread().name)
        real_unlink(path)

    monkeypatch.setattr(atomic.os, "unlink", recording_unlink)
    _write(target, b"new")
    wait_for_removals()
    assert removed_by == ["fabric-core-remover"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_a_small_replaced_file_goes_at_once(tmp_path: Path, small_threshold: int) -> None:
    target = tmp_path / "metrics.csv"
    _write(target, b"x" * (small_threshold - 1))
    assert remover._hold_replaced(target) is None
    _write(target, b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]


def test_a_failed_replace_keeps_the_old_file_under_its_name_only(
    tmp_path: Path, small_threshold: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "last.ckpt"
    old = b"o" * small_threshold
    _write(target, old)

    def failing_replace(src: object, dst: object) -> None:
        raise PermissionError(13, "read-only target", str(dst))

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(PermissionError, match="read-only target"):
        _write(target, b"new")
    assert target.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no temp, no second name


def test_a_second_name_left_by_a_killed_writer_is_swept_by_the_next_write(tmp_path: Path, small_threshold: int) -> None:
    target = tmp_path / "last.ckpt"
    _write(target, b"o" * small_threshold)
    held = remover._hold_replaced(target)
    assert held is not None and held.read_bytes() == target.read_bytes()
    # As if the writer died between the link and its removal: the pid field names a dead process.
    dead = held.with_name(held.name.replace(f"-{os.getpid()}-", "-999999999-"))
    held.rename(dead)
    _write(target, b"new")
    wait_for_removals()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_wait_for_the_parents_pending_removal(
    tmp_path: Path, small_threshold: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "last.ckpt"
    _write(target, b"o" * small_threshold)
    release = threading.Event()
    real_unlink = os.unlink

    def held_unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if threading.current_thread().name == "fabric-core-remover":
            release.wait(30)  # the removal stays pending while the child is forked
        real_unlink(path)

    monkeypatch.setattr(atomic.os, "unlink", held_unlink)
    _write(target, b"new")
    pid = os.fork()
    if pid == 0:  # the child: what its exit would run
        try:
            wait_for_removals()
        finally:
            os._exit(0)
    try:
        for _ in range(200):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            threading.Event().wait(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child waited for a removal only its parent's thread can finish")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
    wait_for_removals()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
