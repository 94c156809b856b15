"""Checkpoint folders written by ranks on several nodes: one shared filesystem, or a disk per node.

Two real processes (gloo on 127.0.0.1) declare 2 nodes of 1 process each, as a launcher on each node would
(NODE_RANK, LOCAL_RANK, WORLD_SIZE). A node's disk is simulated by the folder each process works in: the
same folder for both (shared), or one per node.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]

_JOB = Path(__file__).parents[1] / "_jobs" / "folder_nodes_job.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_nodes(folders: list[Path]) -> list[dict[str, Any]]:
    """Run the job on 2 "nodes", node N in ``folders[N]``; return what each rank reported."""
    base = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "NODE_RANK", "MASTER_PORT", "WORLD_SIZE")}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2", LOCAL_RANK="0")
    nodes = [
        subprocess.Popen(
            [sys.executable, str(_JOB), str(folder)],
            env={**base, "NODE_RANK": str(node)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for node, folder in enumerate(folders)
    ]
    try:
        outputs = [node.communicate(timeout=60)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.communicate()
    for node, output in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, output[-4000:]
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank, folder in enumerate(folders)]


def _previous_checkpoint(folder: Path) -> None:
    (folder / "ckpt").mkdir(parents=True)
    (folder / "ckpt" / "meta.pt").write_bytes(b"")  # what marks a checkpoint folder, which a save may replace
    (folder / "ckpt" / "old.txt").write_text("the previous checkpoint")


def test_on_a_shared_filesystem_rank_0_puts_the_one_folder_in_place(tmp_path: Path) -> None:
    _previous_checkpoint(tmp_path)
    reports = _run_nodes([tmp_path, tmp_path])
    assert [(r["shared"], r["shared_short_timeout"]) for r in reports] == [(True, True)] * 2
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["rank0.txt", "rank1.txt"]
    assert [r["leftovers"] for r in reports] == [[], []]  # no temp folder, no probe


def test_with_a_disk_per_node_each_node_puts_its_own_folder_in_place(tmp_path: Path) -> None:
    folders = [tmp_path / "node0", tmp_path / "node1"]
    for folder in folders:
        _previous_checkpoint(folder)
    reports = _run_nodes(folders)
    assert [(r["shared"], r["shared_short_timeout"]) for r in reports] == [(False, False)] * 2
    for rank, folder in enumerate(folders):
        # Complete on each node: what that node's ranks wrote replaced that node's previous checkpoint.
        assert [p.name for p in (folder / "ckpt").iterdir()] == [f"rank{rank}.txt"]
        assert sorted(p.name for p in folder.iterdir()) == ["ckpt", f"rank{rank}.json"]
    assert [r["leftovers"] for r in reports] == [[], []]


def test_a_folder_of_other_files_is_refused_on_every_node_and_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "train.py").write_text("the user's code, not a checkpoint")
    reports = _run_nodes([tmp_path, tmp_path])
    for report in reports:
        assert report["refused"].startswith("FolderInTheWayError") and "'train.py'" in report["refused"]
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["train.py"]
    assert [r["leftovers"] for r in reports] == [[], []]


def test_one_process_shares_its_filesystem_with_itself_and_a_bad_timeout_is_named(tmp_path: Path) -> None:
    from fabric_core.strategies.single_device import SingleDeviceStrategy
    from fabric_core.utilities import is_shared_filesystem

    strategy = SingleDeviceStrategy()
    assert is_shared_filesystem(strategy, tmp_path) is True
    assert list(tmp_path.iterdir()) == []  # one process: nothing to probe
    with pytest.raises(ValueError, match=r"timeout=-1"):
        is_shared_filesystem(strategy, tmp_path, timeout=-1)
