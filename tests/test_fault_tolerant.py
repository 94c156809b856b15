"""examples/fault_tolerant.py killed, preempted and requeued for real, then resumed to the uninterrupted result.

Each run is the same command; the test only sends signals from outside, by PID, at a step it reads from the
run's output. Steps sleep 50 ms (``--step-seconds``) so that a signal lands well before the run would end.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from fabric_core.run_checkpoints import MARKER

pytestmark = pytest.mark.kill_resume

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "fault_tolerant.py"
OPTIONS = ("--steps", "40", "--every", "5", "--step-seconds", "0.05")
DEADLINE_S = 60


def environment(**extra: str) -> dict[str, str]:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "SLURM_", "MASTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Job:
    """A run in its own session whose output lines are read as they come."""

    def __init__(self, command: Sequence[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def text(self) -> str:
        return "".join(self.output)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first line (from now) that matches ``pattern``; fails if the run ends or the deadline passes."""
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                pytest.fail(f"the run ended before printing {pattern!r}:\n{self.text()[-3000:]}")
            self.output.append(line)
            match = re.match(pattern, line)
            if match:
                return match
        self.kill()
        pytest.fail(f"no line matched {pattern!r} within {DEADLINE_S} s:\n{self.text()[-3000:]}")

    def finish(self) -> int:
        """Wait for the run to end (killing its session at the deadline) and return its exit code."""
        try:
            code = self.process.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the run did not end within {DEADLINE_S} s:\n{self.text()[-3000:]}")
        self._reader.join(timeout=10)
        while not self.lines.empty():
            line = self.lines.get()
            if line is not None:
                self.output.append(line)
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # the session ended already
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def one_process(directory: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), *OPTIONS, "--dir", str(directory)]


def two_processes(directory: Path, port: int, strategy: str = "ddp") -> list[str]:
    launcher = (sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2")
    script = (str(SCRIPT), *OPTIONS, "--dir", str(directory))
    return [*launcher, "--strategy", strategy, "--main-port", str(port), *script]


def finished(job: Job) -> tuple[str, str]:
    """Wait for a run to end by itself; its final digest and its whole output."""
    try:
        code = job.finish()
    finally:
        job.kill()
    out = job.text()
    assert code == 0, out[-3000:]
    digests = re.findall(r"^final digest: ([0-9a-f]{64})$", out, re.MULTILINE)
    assert len(digests) == 1, out[-3000:]  # rank 0 alone prints it
    return digests[0], out


def workers(launcher: int) -> list[int]:
    """The PIDs of the launcher's worker processes (its children running the script)."""
    found = []
    for task in Path(f"/proc/{launcher}/task").iterdir():
        for pid in (task / "children").read_text().split():
            if SCRIPT.name in Path(f"/proc/{pid}/cmdline").read_text():
                found.append(int(pid))
    return found


def preempted(job: Job, directory: Path, after: int) -> int:
    """SIGTERM the run (the launcher, which passes it on to every worker) after step ``after``; the step saved."""
    try:
        job.wait_for(rf"^step {after} ")
        os.kill(job.process.pid, signal.SIGTERM)
        code = job.finish()
    finally:
        job.kill()
    out = job.text()
    assert code == 128 + signal.SIGTERM, out[-3000:]
    (stopped,) = map(int, re.findall(r"^preempted by SIGTERM at step (\d+): saved ", out, re.MULTILINE))
    assert after <= stopped < 40
    assert (directory / f"step-{stopped:08d}" / MARKER).is_file()
    return stopped


def killed_preempted_and_resumed(command: Sequence[str], directory: Path, env: dict[str, str], victim: str) -> str:
    """SIGKILL the run mid-way, SIGTERM the rerun mid-way, finish a third run; return its digest."""
    job = Job(command, env)
    try:
        job.wait_for(r"^step 12 ")
        pid = job.process.pid if victim == "job" else workers(job.process.pid)[-1]
        os.kill(pid, signal.SIGKILL)
        assert job.finish() != 0
    finally:
        job.kill()
    assert not (directory / "step-00000040").exists()

    job = Job(command, env)
    resumed = int(job.wait_for(r"^resumed at step (\d+)").group(1))
    assert resumed >= 10 and resumed % 5 == 0
    stopped = preempted(job, directory, after=resumed + 3)

    digest, out = finished(Job(command, env))
    assert f"resumed at step {stopped}" in out
    return digest


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_one_process_killed_then_preempted_ends_with_the_uninterrupted_digest(tmp_path: Path) -> None:
    env = environment()
    straight = Job(one_process(tmp_path / "straight"), env)  # the uninterrupted run, alongside
    directory = tmp_path / "broken"
    try:
        digest = killed_preempted_and_resumed(one_process(directory), directory, env, victim="job")
        assert digest == finished(straight)[0]
    finally:
        straight.kill()


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_two_ddp_processes_with_a_killed_worker_then_preempted_end_with_the_uninterrupted_digest(
    tmp_path: Path,
) -> None:
    env = environment()
    straight = Job(two_processes(tmp_path / "straight", free_port()), env)  # the uninterrupted run, alongside
    directory = tmp_path / "broken"
    command = two_processes(directory, free_port())
    try:
        digest = killed_preempted_and_resumed(command, directory, env, victim="worker")
        assert digest == finished(straight)[0]
    finally:
        straight.kill()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_slurm_requeue_signal_saves_requeues_through_scontrol_and_exits_0(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "scontrol.args"
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    fake.chmod(0o755)
    slurm = {
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NNODES": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "train",
        "SLURM_NODELIST": "127.0.0.1",
    }
    env = environment(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **slurm)
    directory = tmp_path / "run"
    job = Job(one_process(directory), env)
    try:
        job.wait_for(r"^step 7 ")
        os.kill(job.process.pid, signal.SIGUSR1)  # SLURMEnvironment's requeue_signal
        code = job.finish()
    finally:
        job.kill()
    out = job.text()
    assert code == 0, out[-3000:]
    (stopped,) = map(int, re.findall(r"^preempted by SIGUSR1 at step (\d+): saved .*requeued the job", out, re.M))
    assert (directory / f"step-{stopped:08d}" / MARKER).is_file()
    assert record.read_text() == "requeue 4242\n"


@pytest.mark.multiprocess
@pytest.mark.timeout(200)
def test_two_fsdp_processes_preempted_save_a_sharded_checkpoint_and_resume_to_the_uninterrupted_digest(
    tmp_path: Path,
) -> None:
    pytest.importorskip("fabric_core_fsdp")
    env = environment()
    straight = Job(two_processes(tmp_path / "straight", free_port(), "fsdp"), env)  # uninterrupted, alongside
    directory = tmp_path / "broken"
    command = two_processes(directory, free_port(), "fsdp")
    try:
        stopped = preempted(Job(command, env), directory, after=8)
        assert (directory / f"step-{stopped:08d}" / "state" / ".metadata").is_file()  # a sharded folder
        digest, out = finished(Job(command, env))
        assert f"resumed at step {stopped}" in out and digest == finished(straight)[0]
    finally:
        straight.kill()


# A worker killed under --max-restarts at 1 to 4 processes (ddp) and 2 and 4 (fsdp), three times per job:
# tests/test_resume_world_sizes.py, in CI's world_sizes step.
