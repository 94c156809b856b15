"""Figures for `fabric-core run` process handling: how fast workers follow a killed launcher, and how fast a
worker's failure ends the job with the cause printed.

Usage: python scripts/run_lifetime_figures.py [REPEATS]   (2-process cpu jobs of tests/_jobs/run_worker_job.py)
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = Path(__file__).resolve().parent.parent / "tests" / "_jobs" / "run_worker_job.py"


def _start(outdir: Path, mode: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "MASTER_", "LOCAL_RANK"))}
    command = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2"]
    return subprocess.Popen(
        [*command, str(JOB), str(outdir), mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _pids(outdir: Path) -> list[int]:
    end = time.monotonic() + 120
    while time.monotonic() < end:
        files = list(outdir.glob("pid*"))
        if len(files) == 2 and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.02)
    raise RuntimeError("workers did not start")


def sigkill_to_gone(outdir: Path) -> float:
    job = _start(outdir, "sleep")
    pids = _pids(outdir)
    os.kill(job.pid, signal.SIGKILL)
    start = time.monotonic()
    while any(_alive(p) for p in pids):
        if time.monotonic() - start > 30:
            raise RuntimeError(f"workers left running: {pids}")
        time.sleep(0.005)
    job.communicate()
    return time.monotonic() - start


def failure_to_exit(outdir: Path) -> float:
    job = _start(outdir, "exit7")
    _, err = job.communicate(timeout=120)
    ended = time.time()
    assert job.returncode == 7 and "exited with code 7" in err, (job.returncode, err[-2000:])
    return ended - float((outdir / "failed_at").read_text())


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        kills, failures = [], []
        for i in range(repeats):
            for name, measure, into in (("k", sigkill_to_gone, kills), ("f", failure_to_exit, failures)):
                outdir = Path(tmp, f"{name}{i}")
                outdir.mkdir()
                into.append(measure(outdir))
    for label, values in (
        ("SIGKILL of the launcher -> last worker gone", kills),
        ("worker exits 7 -> job exits 7, cause printed", failures),
    ):
        print(
            f"{label}: n={len(values)} min {min(values):.3f} s, median {statistics.median(values):.3f} s, "
            f"max {max(values):.3f} s"
        )


if __name__ == "__main__":
    main()
