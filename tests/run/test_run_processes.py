"""`fabric-core run` as a process manager: ports, a killed launcher, exit codes, refused configurations.

Every job here is real: the command line starts real worker processes (torchrun underneath). The workers
of `_jobs/run_worker_job.py` import neither torch nor Fabric, so a job costs little more than the
launcher's own start; `_jobs/cli_job.py` trains with gloo on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

JOBS = Path(__file__).parents[1] / "_jobs"
pytestmark = pytest.mark.multiprocess


def environment(**extra: str) -> dict[str, str]:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(skip)}, **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*options: str, outdir: Path, mode: str, job: str = "run_worker_job.py", **env: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "fabric_core", "run", *options, str(JOBS / job), str(outdir), mode]
    return subprocess.Popen(
        command,
        env=environment(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no procfs: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def wait_for_pids(outdir: Path, count: int, deadline: float) -> list[int]:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        files = sorted(outdir.glob("pid*"))
        if len(files) == count and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"the workers did not start within {deadline} s: {sorted(outdir.iterdir())}")


def wait_gone(pids: list[int], deadline: float) -> float:
    start_time = time.monotonic()
    while any(alive(p) for p in pids):
        if time.monotonic() - start_time > deadline:
            raise AssertionError(f"workers still running {deadline} s later: {[p for p in pids if alive(p)]}")
        time.sleep(0.02)
    return time.monotonic() - start_time


@pytest.fixture
def reaper(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Jobs to clean up whatever happens: the launcher's session and every worker that wrote its pid."""
    jobs: list[subprocess.Popen[str]] = []
    yield jobs
    # Workers first: a worker left behind holds the job's pipes open.
    for pid_file in tmp_path.rglob("pid*"):
        pid = int(pid_file.read_text() or 0)
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)
    for job in jobs:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.communicate(timeout=30)


def finish(job: subprocess.Popen[str], timeout: float) -> tuple[int, str]:
    _, err = job.communicate(timeout=timeout)
    return job.returncode, err


# -- item 8: ports ---------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_two_jobs_without_a_port_run_side_by_side(tmp_path: Path, reaper: list[subprocess.Popen[str]]) -> None:
    outdirs = [tmp_path / "a", tmp_path / "b"]
    for d in outdirs:
        d.mkdir()
    options = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp")
    reaper.extend(start(*options, outdir=d, mode="train", job="cli_job.py") for d in outdirs)
    results = [finish(job, 200) for job in reaper]  # generous: a loaded 2-core CI machine
    assert [code for code, _ in results] == [0, 0], [err[-3000:] for _, err in results]
    reports = [[json.loads(p.read_text()) for p in sorted(d.glob("rank*.json"))] for d in outdirs]
    assert all(len(r) == 2 and r[0]["synchronised"] for r in reports)
    ports = [{r["master_port"] for r in rs} for rs in reports]
    assert all(len(p) == 1 for p in ports) and ports[0] != ports[1], ports


@pytest.mark.timeout(90)
def test_master_port_and_main_port_are_used(tmp_path: Path, reaper: list[subprocess.Popen[str]]) -> None:
    from_env, from_flag = tmp_path / "env", tmp_path / "flag"
    from_env.mkdir(), from_flag.mkdir()
    env_port, flag_port = free_port(), free_port()
    options = ("--accelerator", "cpu", "--devices", "2")
    reaper.append(start(*options, outdir=from_env, mode="sleep", MASTER_PORT=str(env_port)))
    # The flag wins over the environment.
    reaper.append(start(*options, "--main-port", str(flag_port), outdir=from_flag, mode="sleep", MASTER_PORT="1"))
    for d in (from_env, from_flag):
        wait_for_pids(d, 2, 60)
    seen = {
        d.name: {json.loads(p.read_text())["MASTER_PORT"] for p in d.glob("env*.json")} for d in (from_env, from_flag)
    }
    assert seen == {"env": {str(env_port)}, "flag": {str(flag_port)}}


# -- item 10: the launcher's death, signals and exit codes -------------------------------------------------


@pytest.mark.timeout(90)
def test_sigkill_of_the_launcher_takes_the_workers_with_it(tmp_path: Path, reaper: list[subprocess.Popen[str]]) -> None:
    job = start("--accelerator", "cpu", "--devices", "2", outdir=tmp_path, mode="sleep")
    reaper.append(job)
    pids = wait_for_pids(tmp_path, 2, 60)
    assert all(alive(p) for p in pids)
    os.kill(job.pid, signal.SIGKILL)
    seconds = wait_gone(pids, 10)
    print(f"SIGKILL of the launcher -> last worker gone: {seconds:.2f} s")


@pytest.mark.timeout(90)
def test_a_worker_exit_code_is_the_job_exit_code(tmp_path: Path, reaper: list[subprocess.Popen[str]]) -> None:
    job = start("--accelerator", "cpu", "--devices", "2", outdir=tmp_path, mode="exit7")
    reaper.append(job)
    pids = wait_for_pids(tmp_path, 2, 60)
    failed_at = time.monotonic()
    code, err = finish(job, 60)
    print(f"worker exit 7 -> job exit {code} after {time.monotonic() - failed_at:.2f} s")
    assert code == 7, err[-3000:]
    assert "exit code 7" in err or "exitcode: 7" in err, err[-3000:]
    assert not any(alive(p) for p in pids)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_launcher_stops_the_job_with_the_shell_code(
    tmp_path: Path, reaper: list[subprocess.Popen[str]], signum: int, code: int
) -> None:
    job = start("--accelerator", "cpu", "--devices", "2", outdir=tmp_path, mode="sleep")
    reaper.append(job)
    pids = wait_for_pids(tmp_path, 2, 60)
    os.kill(job.pid, signum)
    got, err = finish(job, 60)
    assert got == code, err[-3000:]
    assert not any(alive(p) for p in pids)


# -- item 13: contradictions refused before anything starts --------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("options", "named"),
    [
        (("--accelerator", "cpu", "--devices", "2", "--strategy", "single_device"), "single_device"),
        (("--accelerator", "cpu", "--devices", "-1"), "-1"),
        (("--accelerator", "cpu", "--devices", "0"), "devices='0'"),
        (("--accelerator", "cpu", "--num-nodes", "0"), "0"),
        (("--accelerator", "cpu", "--main-port", "70000"), "70000"),
    ],
)
def test_contradictions_are_refused_before_any_worker_starts(
    tmp_path: Path, reaper: list[subprocess.Popen[str]], options: tuple[str, ...], named: str
) -> None:
    job = start(*options, outdir=tmp_path, mode="sleep")
    reaper.append(job)
    code, err = finish(job, 100)
    assert code == 2, err[-3000:]
    assert named in err and "Traceback" not in err, err[-3000:]
    assert list(tmp_path.glob("started*")) == []


# -- item 11 (part): FABRIC_CORE_CLI_USED=1 leaked into a shell ------------------------------------------------


@pytest.mark.timeout(60)
def test_a_leaked_cli_variable_without_a_launcher_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from fabric_core.testing import run_in_own_session

    script = tmp_path / "train.py"
    script.write_text(
        "from fabric_core import Fabric\nFabric(accelerator='cpu', strategy='ddp', devices=2)\nprint('constructed')\n"
    )
    # Before the fix this waited for a rank 1 that nobody starts (the 30-minute rendezvous timeout).
    done = run_in_own_session([sys.executable, str(script)], timeout=50, env=environment(FABRIC_CORE_CLI_USED="1"))
    assert done.returncode == 1, done.stdout[-3000:]
    assert "FABRIC_CORE_CLI_USED=1 is set, but this process was not started by `fabric-core run`" in done.stdout
    assert "unset FABRIC_CORE_CLI_USED" in done.stdout and "constructed" not in done.stdout


@pytest.mark.timeout(60)
def test_the_portable_watcher_alone_ends_an_orphaned_worker(tmp_path: Path) -> None:
    """Without the parent-death signal (macOS, or a launcher that could not set it), the watcher thread does it."""
    pid_file = tmp_path / "pid-grandchild"
    grandchild = (
        "import os, sys, time\n"
        "from fabric_core._run.worker import watch_parent\n"
        "watch_parent(os.getppid(), interval=0.1)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "while True: time.sleep(0.2)\n"
    )
    middle = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {grandchild!r}])\ntime.sleep(60)\n"
    parent = subprocess.Popen([sys.executable, "-c", middle], env=environment(), start_new_session=True)
    try:
        end = time.monotonic() + 40
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < end:
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        assert alive(pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_gone([pid], 10)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
        if pid_file.exists() and pid_file.read_text() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_worker_whose_launcher_is_already_gone_ends_at_once() -> None:
    from fabric_core.testing import run_in_own_session

    code = "from fabric_core._run.worker import tie_to_launcher\ntie_to_launcher(1)\nprint('survived')\n"
    done = run_in_own_session([sys.executable, "-c", code], timeout=30, env=environment())
    assert done.returncode == -signal.SIGKILL and "survived" not in done.stdout


@pytest.mark.timeout(90)
def test_sigkill_of_rank_0_takes_the_ranks_it_started_with_it(tmp_path: Path) -> None:
    """Without the CLI, `strategy="ddp"` makes the user's process rank 0 and the parent of the other ranks."""
    job = subprocess.Popen(
        [sys.executable, str(JOBS / "popen_job.py"), "sleep", str(tmp_path)],
        env=environment(),
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        pids = wait_for_pids(tmp_path, 2, 60)
        os.kill(job.pid, signal.SIGKILL)
        job.wait(timeout=10)
        wait_gone(pids, 10)
    finally:
        for pid_file in tmp_path.glob("pid*"):
            if alive(int(pid_file.read_text())):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


@pytest.mark.timeout(60)
def test_a_bad_master_port_in_the_environment_is_refused(tmp_path: Path, reaper: list[subprocess.Popen[str]]) -> None:
    job = start("--accelerator", "cpu", outdir=tmp_path, mode="sleep", MASTER_PORT="0")
    reaper.append(job)
    code, err = finish(job, 50)
    assert code == 2 and "MASTER_PORT='0'" in err and "1 to 65535" in err, err[-3000:]
    assert list(tmp_path.glob("started*")) == []
