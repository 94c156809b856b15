"""`fabric-core run`: real processes started by torchrun, one node and two nodes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

JOB = Path(__file__).parents[1] / "_jobs" / "cli_job.py"
pytestmark = pytest.mark.multiprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(*options: str, outdir: Path, mode: str = "train") -> list[str]:
    return [sys.executable, "-m", "fabric_core", "run", *options, str(JOB), str(outdir), mode]


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK"))}


def reports(outdir: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(outdir.glob("rank*.json"))]


@pytest.mark.timeout(120)
def test_two_processes_on_one_node(tmp_path: Path) -> None:
    options = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--main-port", str(free_port()))
    done = subprocess.run(
        command(*options, outdir=tmp_path), env=environment(), capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = reports(tmp_path)
    assert [r["rank"] for r in got] == [0, 1]
    assert [r["local_rank"] for r in got] == [0, 1]
    for r in got:
        assert r["world_size"] == 2 and r["synchronised"] is True
        assert (r["strategy"], r["environment"]) == ("DDPStrategy", "TorchElasticEnvironment")


@pytest.mark.timeout(150)
def test_two_nodes_of_one_process_each(tmp_path: Path) -> None:
    port = str(free_port())
    common = (
        "--accelerator",
        "cpu",
        "--devices",
        "1",
        "--num-nodes",
        "2",
        "--strategy",
        "ddp",
        "--main-address",
        "127.0.0.1",
        "--main-port",
        port,
        "--precision",
        "bf16-mixed",
    )
    nodes = [
        subprocess.Popen(
            command(*common, "--node-rank", str(rank), outdir=tmp_path),
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=140) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    got = reports(tmp_path)
    assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in got] == [(0, 0, 0), (1, 1, 0)]
    assert all(r["world_size"] == 2 and r["synchronised"] and r["precision"] == "MixedPrecision" for r in got)


@pytest.mark.timeout(120)
def test_a_value_in_the_script_that_contradicts_the_command_line_is_an_error(tmp_path: Path) -> None:
    options = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--main-port", str(free_port()))
    done = subprocess.run(
        command(*options, outdir=tmp_path, mode="conflict"),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode != 0
    assert "Fabric(devices=1, ...)" in done.stderr and "--devices=2" in done.stderr
    assert reports(tmp_path) == []


@pytest.mark.timeout(120)
def test_a_failing_rank_fails_the_job_with_its_traceback(tmp_path: Path) -> None:
    options = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--main-port", str(free_port()))
    start = time.monotonic()
    done = subprocess.run(
        command(*options, outdir=tmp_path, mode="fail"), env=environment(), capture_output=True, text=True, timeout=110
    )
    assert done.returncode != 0
    assert "rank 1 failed on purpose" in done.stderr
    assert time.monotonic() - start < 60


def test_unknown_names_are_refused_before_any_process_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        command("--strategy", "dpp", outdir=tmp_path), env=environment(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "Did you mean" in done.stderr and "'ddp'" in done.stderr
    done = subprocess.run(
        command("--precision", "bf17", outdir=tmp_path), env=environment(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "'bf16'" in done.stderr
