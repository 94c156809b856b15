"""``fabric_core.testing.run_in_own_session``: real processes, a real session kill."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric_core.testing import run_in_own_session

pytestmark = pytest.mark.timeout(60)


def test_output_and_errors_come_back_together_with_the_return_code() -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    done = run_in_own_session([sys.executable, "-c", code], timeout=30, env={**os.environ, "X": "1"})
    assert done.returncode == 3
    assert "out" in done.stdout and "err" in done.stdout


@pytest.mark.slow
def test_a_timed_out_job_is_killed_with_the_processes_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # The job starts a child that would outlive it, says so, and waits.
    code = (
        "import subprocess, sys, time;"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid));"
        "print('started', flush=True); time.sleep(60)"
    )
    with pytest.raises(subprocess.TimeoutExpired) as info:
        run_in_own_session([sys.executable, "-c", code], timeout=3)
    assert "started" in info.value.output
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), f"the job's child {child} outlived the job"


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody has reaped yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return not Path("/proc").is_dir()  # gone meanwhile; without /proc, kill(pid, 0) is all there is
    return state != "Z"
