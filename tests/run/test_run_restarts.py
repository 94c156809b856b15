"""`fabric-core run --max-restarts N`: a worker killed from outside restarts every worker, and the run ends
where an uninterrupted one ends. The same script under plain torchrun. Real processes, gloo on 127.0.0.1.

`_jobs/restart_job.py` saves with plain `fabric.save` to one file every few steps and loads it at the top.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

JOB = Path(__file__).parents[1] / "_jobs" / "restart_job.py"
STEPS, EVERY, PAUSE = "40", "5", "0.05"
DDP = ("--accelerator", "cpu", "--devices", "2", "--strategy", "ddp")
pytestmark = pytest.mark.multiprocess


def environment() -> dict[str, str]:
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK", "PET_")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def fabric_run(*options: str) -> list[str]:
    return [sys.executable, "-m", "fabric_core", "run", *options, str(JOB)]


def torchrun(*options: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *options, str(JOB)]


def start(command: list[str], outdir: Path) -> subprocess.Popen[str]:
    outdir.mkdir(exist_ok=True)
    return subprocess.Popen(
        [*command, str(outdir), STEPS, EVERY, PAUSE],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.fixture
def jobs() -> Iterator[list[subprocess.Popen[str]]]:
    """Jobs to end whatever happens: each runs in a session of its own, workers included."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for job in started:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.communicate(timeout=30)


def kill_rank_1_at(outdir: Path, step: int, deadline: float) -> int:
    """SIGKILL rank 1 of the first attempt once it reached ``step``; return its pid."""
    end = time.monotonic() + deadline
    progress = outdir / "progress1"
    while time.monotonic() < end:
        if progress.exists():
            pid, at, _ = progress.read_text().split()
            if int(at) >= step:
                os.kill(int(pid), signal.SIGKILL)
                return int(pid)
        time.sleep(0.01)
    raise AssertionError(f"rank 1 did not reach step {step} within {deadline} s")


def final_parameters(outdir: Path) -> dict[str, object]:
    import torch

    return torch.load(outdir / "final.pt", weights_only=True)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def uninterrupted() -> dict[str, object]:
    """The parameters of an uninterrupted 2-process run of the job, computed in this process.

    DDP averages the two ranks' gradients: ``a / 2 + b / 2`` here is bit for bit what gloo's sum of the
    halves gives there (dividing by 2 is exact), and the backward of each rank's batch is the same
    computation on the same values, so this equals a real uninterrupted `fabric-core run` of the job (checked
    when this reference was written; a drift would fail the tests, never pass them silently).
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(int(STEPS)):
        grads = []
        for rank in (0, 1):
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1000 * step + rank))
            model.zero_grad()
            (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        for param, first, second in zip(model.parameters(), *grads, strict=True):
            param.grad = first / 2 + second / 2
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same(got: dict[str, object], want: dict[str, object]) -> None:
    import torch

    assert got.keys() == want.keys()
    different = [k for k in want if not torch.equal(got[k], want[k])]  # type: ignore[arg-type]
    assert not different, different


@pytest.mark.timeout(240)
@pytest.mark.kill_resume
def test_a_killed_worker_restarts_every_worker_and_the_run_ends_as_if_uninterrupted(
    tmp_path: Path, jobs: list[subprocess.Popen[str]], uninterrupted: dict[str, object]
) -> None:
    job = start(fabric_run("--max-restarts", "2", *DDP), tmp_path)
    jobs.append(job)
    killed = kill_rank_1_at(tmp_path, 12, 120)
    _, err = job.communicate(timeout=150)
    assert job.returncode == 0, err[-3000:]
    # Both ranks started again, as restart 1, from the last checkpoint before the kill (step 10 or later).
    resumed = {p.name: int(p.read_text().split()[0]) for p in tmp_path.glob("attempt*-1")}
    assert sorted(resumed) == ["attempt0-1", "attempt1-1"], sorted(p.name for p in tmp_path.iterdir())
    assert all(step >= 10 for step in resumed.values()), resumed
    assert f"rank 1 (pid {killed}) was killed by signal 9" in err and "restarting every worker (1 of 2" in err, err
    assert_same(final_parameters(tmp_path), uninterrupted)


@pytest.mark.timeout(240)
@pytest.mark.kill_resume
def test_the_same_script_survives_a_kill_under_plain_torchrun(
    tmp_path: Path, jobs: list[subprocess.Popen[str]], uninterrupted: dict[str, object]
) -> None:
    options = ("--nproc-per-node", "2", "--max-restarts", "2", "--rdzv-backend", "c10d")
    job = start(torchrun(*options, "--rdzv-endpoint", "127.0.0.1:0", "--local-addr", "127.0.0.1"), tmp_path)
    jobs.append(job)
    kill_rank_1_at(tmp_path, 12, 120)
    _, err = job.communicate(timeout=150)
    assert job.returncode == 0, err[-3000:]
    assert sorted(p.name for p in tmp_path.glob("attempt*-1")) == ["attempt0-1", "attempt1-1"]
    assert_same(final_parameters(tmp_path), uninterrupted)


@pytest.mark.timeout(120)
@pytest.mark.kill_resume
def test_without_restarts_a_killed_worker_fails_the_job_promptly_naming_it(
    tmp_path: Path, jobs: list[subprocess.Popen[str]]
) -> None:
    job = start(fabric_run("--max-restarts", "0", *DDP), tmp_path)
    jobs.append(job)
    killed = kill_rank_1_at(tmp_path, 3, 120)
    killed_at = time.monotonic()
    _, err = job.communicate(timeout=60)
    seconds = time.monotonic() - killed_at
    print(f"worker SIGKILL -> job exit after {seconds:.2f} s")
    assert job.returncode == 128 + signal.SIGKILL, err[-3000:]
    assert f"rank 1 (pid {killed}) was killed by signal 9" in err, err[-3000:]
    assert "no restarts left (--max-restarts 0)" in err, err[-3000:]
    assert not (tmp_path / "final.pt").exists() and not list(tmp_path.glob("attempt*-1"))
    # Promptly: not a rendezvous or a collective timeout (minutes) but the agent noticing the death.
    assert seconds < 30


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["-1"])  # the in-process test below covers the other shapes
def test_a_bad_max_restarts_is_refused_before_any_worker_starts(tmp_path: Path, value: str) -> None:
    from fabric_core.testing import run_in_own_session

    done = run_in_own_session(
        [*fabric_run("--max-restarts", value, *DDP), str(tmp_path), STEPS, EVERY], timeout=50, env=environment()
    )
    assert done.returncode == 2, done.stdout[-3000:]
    assert f"--max-restarts {value}" in done.stdout and "a whole number >= 0" in done.stdout, done.stdout[-3000:]
    assert "Traceback" not in done.stdout and not list(tmp_path.glob("progress*"))


@pytest.mark.parametrize(
    ("max_restarts", "interval", "named"),
    [("-1", "0.1", "--max-restarts -1"), (" 2.0", "0.1", "--max-restarts  2.0"), ("1", "0", "--monitor-interval 0")],
)
def test_restart_options_name_the_bad_value(max_restarts: str, interval: str, named: str) -> None:
    from fabric_core._run.checks import elastic_options
    from fabric_core.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match=named):
        elastic_options(max_restarts, interval)
    assert elastic_options("3", "0.5") == (3, ["--max-restarts=3", "--monitor-interval=0.5"])


def test_rdzv_options_choose_the_rendezvous_and_refuse_contradictions() -> None:
    from fabric_core._run.checks import rendezvous_options
    from fabric_core.errors import InvalidConfigError

    one_node = rendezvous_options(1, None, None, {}, rdzv_id="job7")
    assert one_node == [
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=127.0.0.1:0",
        "--rdzv-id=job7",
        "--local-addr=127.0.0.1",
    ]
    two_nodes = rendezvous_options(2, None, None, {}, backend="C10D", endpoint="10.0.0.1:29500", rdzv_id="j")
    assert two_nodes == ["--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29500", "--rdzv-id=j"]
    # Several nodes wait for each other as long as FABRIC_CORE_RENDEZVOUS_TIMEOUT says, not torch's 600 s.
    bounded = rendezvous_options(2, None, None, {}, endpoint="10.0.0.1:29500", rdzv_id="j", timeout=30)
    assert bounded[-1] == "--rdzv-conf=join_timeout=30"
    assert rendezvous_options(2, "10.0.0.1", None, {}, timeout=30.4) == [
        "--master_addr=10.0.0.1",
        "--master_port=29400",
        "--rdzv-conf=timeout=30",
    ]
    assert "--rdzv-conf" not in " ".join(rendezvous_options(1, None, "1234", {}, timeout=30))
    refused = [
        ({"backend": "zookeeper"}, "zookeeper"),
        ({"endpoint": "nohost"}, "nohost"),
        ({"endpoint": "h:99999"}, "h:99999"),
    ]
    for options, named in refused:
        with pytest.raises(InvalidConfigError, match=named):
            rendezvous_options(1, None, None, {}, **options)
    with pytest.raises(InvalidConfigError, match="--main-port 1234"):
        rendezvous_options(1, None, "1234", {}, rdzv_id="x")
    with pytest.raises(InvalidConfigError, match="--rdzv-endpoint HOST:PORT"):
        rendezvous_options(2, None, None, {}, backend="c10d")
    with pytest.raises(InvalidConfigError, match=re.escape("10.0.0.1:0")):
        rendezvous_options(2, None, None, {}, endpoint="10.0.0.1:0")


@pytest.mark.timeout(120)
@pytest.mark.kill_resume
def test_once_the_restarts_are_used_up_the_job_fails_naming_the_cause(tmp_path: Path) -> None:
    """Rank 1 exits 7 in every attempt (a light job: no torch in the workers)."""
    from fabric_core.testing import run_in_own_session

    job = Path(__file__).parents[1] / "_jobs" / "run_worker_job.py"
    command = [sys.executable, "-m", "fabric_core", "run", "--max-restarts", "1", "--accelerator", "cpu"]
    done = run_in_own_session([*command, "--devices", "2", str(job), str(tmp_path), "exit7"], 100, environment())
    assert done.returncode == 7, done.stdout[-3000:]
    assert "exited with code 7; restarting every worker (1 of 1" in done.stdout, done.stdout[-3000:]
    assert "exited with code 7; the other workers were stopped; no restarts left (--max-restarts 1)" in done.stdout
    # Two attempts: each rank started twice.
    assert len(list(tmp_path.glob("started1-*"))) == 2, sorted(p.name for p in tmp_path.iterdir())
