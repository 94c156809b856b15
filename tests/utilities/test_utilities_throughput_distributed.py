"""ThroughputMonitor in a real two-process Fabric run (ddp_spawn, gloo on 127.0.0.1): world-size metrics,
and only rank 0 updates, computes and logs.

Run as a script, this file launches the job and each rank writes what it saw; the test reads the records.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fabric_core.testing import RecordingLogger, run_in_own_session

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]


def _run(fabric: Any, out_dir: str) -> None:
    from fabric_core.utilities.throughput import ThroughputMonitor

    monitor = ThroughputMonitor(fabric, window_size=2)
    monitor.update(time=1.0, batches=1, samples=4, flops=100)
    monitor.update(time=2.0, batches=2, samples=8, flops=100)
    logged = monitor.compute_and_log()
    recorder = fabric.logger
    record = {"rank": fabric.global_rank, "world": monitor.world_size, "logged": logged, "rows": recorder.rows}
    Path(out_dir, f"rank{fabric.global_rank}.json").write_text(json.dumps(record))


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out_dir = tmp_path_factory.mktemp("throughput")
    try:
        job = run_in_own_session([sys.executable, __file__, str(out_dir)], timeout=80)
    except subprocess.TimeoutExpired as timed_out:
        pytest.fail(f"the two-process job did not finish in 80 s:\n{timed_out.output}")
    assert job.returncode == 0, job.stdout
    return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(2)]


def test_monitor_reports_the_world_and_logs_on_rank_zero_only(seen: list[dict[str, Any]]) -> None:
    zero, one = seen
    assert zero["world"] == one["world"] == 2
    expected = {
        "time": 2.0,
        "batches": 2,
        "samples": 8,
        "device/batches_per_sec": 1.0,
        "device/samples_per_sec": 4.0,
        "batches_per_sec": 2.0,
        "samples_per_sec": 8.0,
        "flops_per_sec": 200.0,
        "device/flops_per_sec": 100.0,
    }
    assert zero["logged"] == expected and zero["rows"] == [[0, expected]]
    assert one["logged"] == {} and one["rows"] == []


if __name__ == "__main__":
    from fabric_core import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn", loggers=RecordingLogger())
    fabric.launch(_run, sys.argv[1])
