"""fabric-core under a real SLURM cluster: ``srun`` and ``sbatch`` jobs, preemptions with requeue: USR1 by
``scancel``, USR2 sent by SLURM's ``--signal=USR2@50``, and USR2 in a job whose tasks have no ``scontrol``,
requeued by the batch script of docs/fault-tolerant-training.md.

``scripts/slurm_check.sh`` starts a one-node cluster (Debian's slurm-wlm and munge) and runs this module with
``pytest -m slurm tests/slurm``; without a cluster to talk to, the module skips. Every job gets a SLURM time
limit, a deadline here, and a name of its own that the test cancels when it ends, whatever happened.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from fabric_core.run_checkpoints import MARKER
from fabric_core.testing import run_in_own_session

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess]

ROOT = Path(__file__).resolve().parents[2]
FAULT_TOLERANT = ROOT / "examples" / "fault_tolerant.py"
FAULT_TOLERANT_DOCS = ROOT / "docs" / "fault-tolerant-training.md"
DEVICES_JOB = Path(__file__).resolve().parent / "devices_job.py"
# The same run everywhere; only --dir (and the sleep that leaves time to signal it) differ.
OPTIONS = ("--steps", "30", "--every", "5")
DEADLINE_S = 120
# States after which a job never runs again (without a requeue, which is not asked for then).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


@pytest.fixture(scope="module", autouse=True)
def cluster() -> str:
    """The node list of a cluster that answers, with a node ready for jobs; otherwise skip the module."""
    if not all(shutil.which(command) for command in ("sinfo", "srun", "sbatch", "scancel", "scontrol")):
        pytest.skip("SLURM's commands (sinfo, srun, sbatch) are not on PATH: scripts/slurm_check.sh installs them")
    try:
        found = subprocess.run(["sinfo", "-h", "-o", "%T %N"], capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("`sinfo` did not answer within 20 s: no SLURM cluster is up (scripts/slurm_check.sh starts one)")
    states = [line.split() for line in found.stdout.splitlines()]
    ready = [nodes for state, nodes in states if state.rstrip("*~#") in {"idle", "mixed"}]
    if found.returncode != 0 or not ready:
        why = ((found.stderr or found.stdout).strip().splitlines() or ["no node"])[-1]  # sinfo's last word
        pytest.skip(f"no SLURM node is ready for jobs ({why}): scripts/slurm_check.sh starts a one-node cluster")
    return ready[0]


@pytest.fixture
def job_name() -> Iterator[str]:
    """A name for the test's jobs; whatever still runs under it is cancelled when the test ends."""
    name = f"fabric-core-{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(["scancel", "--name", name], capture_output=True, timeout=20, check=False)


@pytest.fixture(scope="module")
def uninterrupted_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final digest of ``fabric-core run --devices 2 --strategy ddp examples/fault_tolerant.py``, untouched."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    launcher = ("-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp")
    command = [sys.executable, *launcher, "--main-port", str(free_port()), str(FAULT_TOLERANT), *OPTIONS]
    done = run_in_own_session([*command, "--dir", str(directory)], timeout=DEADLINE_S, env=environment())
    assert done.returncode == 0, done.stdout[-3000:]
    return final_digest(done.stdout)


def environment() -> dict[str, str]:
    """This process's environment less what would pass for a job's topology (SLURM_CONF stays: it names the cluster)."""
    rank_variables = ("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "TORCHELASTIC", "FABRIC_CORE_")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(rank_variables) and (not key.startswith("SLURM_") or key == "SLURM_CONF")
    }
    env["OMP_NUM_THREADS"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def srun(name: str, directory: Path, options: Sequence[str], *command: str) -> subprocess.CompletedProcess[str]:
    """``srun`` a job step in its own allocation; SLURM stops it after 2 minutes, this test after DEADLINE_S."""
    limits = (f"--job-name={name}", "--time=2", f"--chdir={directory}", "--kill-on-bad-exit=1")
    return run_in_own_session(["srun", *limits, *options, *command], timeout=DEADLINE_S, env=environment())


def final_digest(output: str) -> str:
    digests: list[str] = re.findall(r"^final digest: ([0-9a-f]{64})$", output, re.MULTILINE)
    assert len(digests) == 1, output[-3000:]  # rank 0 alone prints it
    return digests[0]


def batch_script(path: Path, name: str, output: Path, minutes: int, body: str, *options: str) -> Path:
    """A batch script of two tasks that SLURM may requeue, appending every run's output to ``output``.

    ``body`` is the script after its ``#SBATCH`` lines, ``options`` more ``#SBATCH`` options.
    """
    header = [
        f"--job-name={name}",
        "--ntasks-per-node=2",
        f"--time={minutes}",
        "--requeue",
        "--open-mode=append",
        f"--output={output}",
        f"--chdir={path.parent}",
        *options,
    ]
    path.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {option}\n" for option in header) + body)
    return path


def sbatch(batch: Path) -> int:
    """Submit a batch script; its job id."""
    submitted = subprocess.run(
        ["sbatch", "--parsable", str(batch)], capture_output=True, text=True, timeout=20, env=environment()
    )
    assert submitted.returncode == 0, submitted.stderr
    return int(submitted.stdout.strip().split(";")[0])


def documented_requeue_script() -> str:
    """The batch script of docs/fault-tolerant-training.md that requeues a job whose tasks have no ``scontrol``."""
    blocks = re.findall(r"^```bash\n(.*?)^```$", FAULT_TOLERANT_DOCS.read_text(), re.MULTILINE | re.DOTALL)
    (script,) = (block for block in blocks if "scontrol requeue" in block)
    return str(script)


def job_fields(job_id: int) -> dict[str, str]:
    """``scontrol show job``'s fields (those this module reads hold no spaces)."""
    shown = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True, timeout=20)
    assert shown.returncode == 0, shown.stderr
    return dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)


def job_fields_by_name(name: str) -> dict[str, str]:
    """The fields of the one job called ``name`` (kept by the controller for a while after it ends)."""
    shown = subprocess.run(["scontrol", "-o", "show", "job"], capture_output=True, text=True, timeout=20)
    assert shown.returncode == 0, shown.stderr
    (line,) = (line for line in shown.stdout.splitlines() if f" JobName={name} " in f" {line} ")
    return dict(item.split("=", 1) for item in line.split() if "=" in item)


def wait_for_line(output: Path, pattern: str, job_id: int, deadline: float) -> None:
    """Poll the job's output file until a line matches; fail if the job ends first or the deadline passes."""
    while time.monotonic() < deadline:
        text = output.read_text() if output.exists() else ""
        if re.search(pattern, text, re.MULTILINE):
            return
        if job_fields(job_id)["JobState"] in FINAL_STATES:
            pytest.fail(f"job {job_id} ended before printing {pattern!r}:\n{text[-3000:]}")
        time.sleep(0.2)
    text = output.read_text() if output.exists() else ""
    pytest.fail(f"job {job_id} printed no {pattern!r} in time:\n{text[-3000:]}")


def wait_until_final(job_id: int, deadline: float) -> dict[str, str]:
    """The job's fields once it has ended for good."""
    while time.monotonic() < deadline:
        fields = job_fields(job_id)
        if fields["JobState"] in FINAL_STATES:
            return fields
        time.sleep(0.5)
    pytest.fail(f"job {job_id} had not ended in time: {job_fields(job_id)}")


@pytest.mark.timeout(DEADLINE_S + 30)
def test_srun_with_ntasks_per_node_2_runs_fabric_defaults_as_two_ddp_ranks(
    tmp_path: Path, job_name: str, cluster: str
) -> None:
    done = srun(job_name, tmp_path, ["--ntasks-per-node=2"], sys.executable, str(DEVICES_JOB))
    assert done.returncode == 0, done.stdout[-3000:]
    lines = re.findall(r"^rank (\d) of (\d): local (\d), node (\d), (.*)$", done.stdout, re.MULTILINE)
    assert sorted((rank, world, local, node) for rank, world, local, node, _ in lines) == [
        ("0", "2", "0", "0"),
        ("1", "2", "1", "0"),
    ], done.stdout[-3000:]
    job_id = int(job_fields_by_name(job_name)["JobId"])
    # The ranks met at the node list's first host, on 15000 + the job id's last four digits: what every task
    # computes alone, with no MASTER_ADDR/MASTER_PORT given.
    expected = (
        f"strategy DDPStrategy, devices 2, environment SLURMEnvironment, main {cluster}:{15000 + job_id % 10000}, sum 3"
    )
    assert [rest for *_, rest in lines] == [expected, expected]
    assert "using `devices=2, num_nodes=1` for `devices='auto'`" in done.stdout


@pytest.mark.timeout(2 * DEADLINE_S + 30)
def test_srun_two_tasks_train_to_the_digest_of_fabric_core_run(
    tmp_path: Path, job_name: str, uninterrupted_digest: str
) -> None:
    directory = tmp_path / "run"
    options = [*OPTIONS, "--dir", str(directory)]
    done = srun(job_name, tmp_path, ["--ntasks-per-node=2"], sys.executable, str(FAULT_TOLERANT), *options)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "starting at step 0" in done.stdout
    assert final_digest(done.stdout) == uninterrupted_digest
    assert (directory / "step-00000030" / MARKER).is_file()


def assert_preempted_once_and_resumed(
    out: str, fields: dict[str, str], signal: str, exit_line: str, directory: Path, first_step: int, digest: str
) -> int:
    """The job completed after one requeue; one run saved at ``signal`` and said ``exit_line``; the next resumed
    from that step and ended with ``digest``. Returns the step."""
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("COMPLETED", "0:0", "1"), out[-3000:]
    preempted = re.findall(rf"^preempted by {signal} at step (\d+): saved (\S+), {exit_line}$", out, re.MULTILINE)
    assert len(preempted) == 1, out[-3000:]
    step, saved = int(preempted[0][0]), Path(preempted[0][1])
    assert first_step <= step < 30 and saved == directory / f"step-{step:08d}"
    assert re.findall(r"^resumed at step (\d+)$", out, re.MULTILINE) == [str(step)], out[-3000:]
    assert final_digest(out) == digest
    return step


@pytest.mark.timeout(3 * DEADLINE_S)
def test_usr1_saves_requeues_the_job_and_the_requeued_job_resumes_to_the_uninterrupted_digest(
    tmp_path: Path, job_name: str, uninterrupted_digest: str
) -> None:
    directory = tmp_path / "run"
    output = tmp_path / "job.out"
    train = [sys.executable, str(FAULT_TOLERANT), *OPTIONS, "--step-seconds", "0.2", "--dir", str(directory)]
    body = f'echo "batch run ${{SLURM_RESTART_COUNT:-0}}"\nsrun --kill-on-bad-exit=1 {" ".join(train)}\n'
    job_id = sbatch(batch_script(tmp_path / "job.sh", job_name, output, 3, body))
    deadline = time.monotonic() + 2 * DEADLINE_S

    wait_for_line(output, r"^step 5 ", job_id, deadline)
    # To the job's steps (the srun tasks), as `#SBATCH --signal=USR1@90` does before the time limit.
    signalled = subprocess.run(["scancel", "--signal=USR1", str(job_id)], capture_output=True, text=True, timeout=20)
    assert signalled.returncode == 0, signalled.stderr
    fields = wait_until_final(job_id, deadline)
    out = output.read_text()

    assert re.findall(r"^batch run (\d+)$", out, re.MULTILINE) == ["0", "1"], out[-3000:]
    requeued = "requeued the job, exiting with code 0"
    assert_preempted_once_and_resumed(out, fields, "SIGUSR1", requeued, directory, 5, uninterrupted_digest)


@pytest.mark.timeout(DEADLINE_S + 30)
def test_ntasks_without_ntasks_per_node_is_refused_naming_the_option_to_use(tmp_path: Path, job_name: str) -> None:
    done = srun(job_name, tmp_path, ["--ntasks=2"], sys.executable, "-c", "from fabric_core import Fabric; Fabric()")
    assert done.returncode != 0, done.stdout[-3000:]
    assert "EnvironmentSetupError: You set `--ntasks=2` in your SLURM bash script" in done.stdout, done.stdout[-3000:]
    assert "HINT: Use `--ntasks-per-node=2` (on one node)" in done.stdout
    assert "Initializing distributed" not in done.stdout  # refused before any rank tried to meet the others


@pytest.mark.timeout(3 * DEADLINE_S)
def test_usr2_sent_by_slurms_signal_option_saves_requeues_and_resumes_to_the_uninterrupted_digest(
    tmp_path: Path, job_name: str, uninterrupted_digest: str
) -> None:
    directory = tmp_path / "run"
    output = tmp_path / "job.out"
    train = [sys.executable, str(FAULT_TOLERANT), *OPTIONS, "--dir", str(directory)]
    # SLURM itself sends USR2 to the tasks 50 s before the 2-minute limit, up to 30 s early here (its controller
    # checks every 30 s; the manual allows 60): 40 to 70 s into each run. The first run sleeps 3 s a step to
    # be training then (30 steps: 90 s); the requeued one does not sleep and ends (in about 20 s) before its
    # own signal comes.
    body = (
        "export FABRIC_CORE_REQUEUE_SIGNAL=USR2\n"
        'echo "batch run ${SLURM_RESTART_COUNT:-0}"\n'
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep=3; else sleep=0; fi\n'
        f'srun --kill-on-bad-exit=1 {" ".join(train)} --step-seconds "$sleep"\n'
    )
    job_id = sbatch(batch_script(tmp_path / "job.sh", job_name, output, 2, body, "--signal=USR2@50"))
    fields = wait_until_final(job_id, time.monotonic() + 2 * DEADLINE_S)
    out = output.read_text()

    assert re.findall(r"^batch run (\d+)$", out, re.MULTILINE) == ["0", "1"], out[-3000:]
    requeued = "requeued the job, exiting with code 0"
    assert_preempted_once_and_resumed(out, fields, "SIGUSR2", requeued, directory, 1, uninterrupted_digest)


@pytest.mark.timeout(3 * DEADLINE_S)
def test_without_scontrol_in_the_tasks_the_run_saves_exits_140_and_the_documented_batch_script_requeues_it(
    tmp_path: Path, job_name: str, uninterrupted_digest: str
) -> None:
    directory = tmp_path / "run"
    output = tmp_path / "job.out"
    # A container without SLURM's client tools: the tasks' PATH is an empty folder. The batch script, outside
    # the "container", keeps its PATH, with scontrol.
    container_path = tmp_path / "container-bin"
    container_path.mkdir()
    train = [sys.executable, str(FAULT_TOLERANT), *OPTIONS, "--step-seconds", "0.2", "--dir", str(directory)]
    documented = documented_requeue_script()
    shebang, rest = documented.split("\n", 1)
    container_command = "apptainer exec train.sif python train.py"
    assert shebang == "#!/bin/bash" and f"srun --kill-on-bad-exit=1 {container_command}\n" in rest, documented
    # The documented script, its training command replaced: its own #SBATCH lines stay (its --signal=USR2@120
    # comes 2 minutes into the 5-minute limit at the earliest, after the test, which plays it with scancel).
    body = rest.replace(container_command, f"env PATH={container_path} {' '.join(train)}")
    job_id = sbatch(batch_script(tmp_path / "job.sh", job_name, output, 5, body))
    deadline = time.monotonic() + 2 * DEADLINE_S

    wait_for_line(output, r"^step 5 ", job_id, deadline)
    signalled = subprocess.run(["scancel", "--signal=USR2", str(job_id)], capture_output=True, text=True, timeout=20)
    assert signalled.returncode == 0, signalled.stderr
    fields = wait_until_final(job_id, deadline)
    out = output.read_text()

    # Rank 0 says why it did not requeue; every rank exits with 128 + 12, and so does srun.
    assert out.count(f"fabric-core: cannot requeue job {job_id}: `scontrol` is not on the PATH") == 1, out[-3000:]
    # The batch script saw srun exit with 140 and requeued the job; the requeued run resumed and finished.
    assert out.count(f"saved at SIGUSR2: requeueing job {job_id} from the batch script") == 1, out[-3000:]
    exited = "exiting with code 140"
    assert_preempted_once_and_resumed(out, fields, "SIGUSR2", exited, directory, 5, uninterrupted_digest)
