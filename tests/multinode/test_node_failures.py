"""Elastic two-node jobs that lose a worker, or a whole node, and end as if nothing had happened.

Both nodes run ``fabric-core run --rdzv-endpoint <node 0>:PORT --rdzv-id J --max-restarts N`` (torch's elastic
agent, c10d rendezvous) on host names that resolve to 127.0.0.1, as in test_two_nodes.py. The job is
``examples/fault_tolerant.py`` with 2 + 2 processes: after the failure every worker on both nodes restarts,
resumes from the newest complete checkpoint on the shared disk, and the job ends with the digest of the same
command run uninterrupted on one node of 4 (which is also the uninterrupted two-node digest).
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fabric_core._run import worker as _worker
from tests.multinode.conftest import descendants
from tests.multinode.test_two_nodes import EXAMPLE, JOB_DEADLINE, digest

if TYPE_CHECKING:
    from tests.multinode.conftest import Cluster, Job

pytestmark = [pytest.mark.multinode, pytest.mark.multiprocess]

#: The module every worker process starts in (named from the module itself, so that a move cannot outdate it).
WORKER_MODULE = _worker.__name__

#: The rendezvous port on node 0 (inside the test's own network namespace, so no other job can hold it).
PORT = 29620


def elastic(
    cluster: Cluster,
    restarts: int,
    nodes: tuple[int, ...] = (0, 1),
    *,
    steps: int = 20,
    rdzv_id: str = "elastic",
    env: dict[str, str] | None = None,
) -> list[Job]:
    """``examples/fault_tolerant.py`` under the elastic agent (c10d rendezvous at node 0) on ``nodes``."""
    options = ("--accelerator", "cpu", "--strategy", "ddp", "--max-restarts", str(restarts))
    options += ("--rdzv-endpoint", f"{cluster.main_address}:{PORT}", "--rdzv-id", rdzv_id)
    script = [EXAMPLE, "--steps", str(steps), "--every", "5", "--step-seconds", "0.2"]
    script += ["--dir", str(cluster.disk / "run")]
    return cluster.fabric_run(script, options=options, main_address=[None, None], nodes=nodes, env=env, name=rdzv_id)


def assert_ended_as_uninterrupted(jobs: list[Job], expected_digest: str) -> None:
    """Each job exited 0, the run resumed from the step-10 checkpoint, and its digest is the uninterrupted one."""
    for job in jobs:
        assert job.wait(JOB_DEADLINE) == 0, job.output[-6000:]
    assert re.search(r"^resumed at step 10$", output(jobs), re.MULTILINE), output(jobs)[-3000:]
    assert digest(output(jobs)) == expected_digest


def output(jobs: list[Job]) -> str:
    """The logs of ``jobs`` together: which node holds global rank 0 is the rendezvous' choice."""
    return "".join(job.output for job in jobs)


def wait_for_line(jobs: list[Job], pattern: str, deadline: float = JOB_DEADLINE) -> None:
    """Wait until a line of one of the jobs' logs matches ``pattern``; fail if they all end or the deadline passes."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if re.search(pattern, output(jobs), re.MULTILINE):
            return
        if all(job.process.poll() is not None for job in jobs):
            break
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} never appeared:\n{output(jobs)[-6000:]}")


def workers(job: Job) -> list[int]:
    """The PIDs of the job's processes that run the training script."""
    found = []
    for pid in descendants(job.process.pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if EXAMPLE.encode() in command and WORKER_MODULE.encode() in command:
            found.append(pid)
    return found


@pytest.mark.timeout(400)
def test_a_worker_killed_on_node_1_restarts_both_nodes_and_the_job_ends_with_the_uninterrupted_digest(
    two_nodes: Cluster, one_node_digest: str
) -> None:
    jobs = elastic(two_nodes, restarts=1)
    wait_for_line(jobs, r"^step 12 ")  # the step-10 checkpoint is complete
    victims = workers(jobs[1])
    assert len(victims) == 2, jobs[1].output[-3000:]
    os.kill(victims[-1], signal.SIGKILL)
    assert_ended_as_uninterrupted(jobs, one_node_digest)


@pytest.mark.timeout(400)
def test_a_whole_node_killed_and_started_again_rejoins_and_the_job_ends_with_the_uninterrupted_digest(
    two_nodes: Cluster, one_node_digest: str
) -> None:
    jobs = elastic(two_nodes, restarts=2)
    wait_for_line(jobs, r"^step 12 ")
    jobs[1].kill()  # node 1 dies whole: its agent and both workers, at once
    assert jobs[1].wait(30) == -signal.SIGKILL
    # Node 0's workers lose their peers and its agent waits in the rendezvous for a second node; the
    # scheduler (here the test) starts node 1's command again, as on a replaced machine.
    wait_for_line(jobs[:1], r"restarting every worker")
    (replacement,) = elastic(two_nodes, restarts=2, nodes=(1,))
    assert_ended_as_uninterrupted([jobs[0], replacement], one_node_digest)


@pytest.mark.timeout(300)
def test_a_whole_node_killed_and_never_replaced_ends_the_other_node_within_the_rendezvous_timeout(
    two_nodes: Cluster,
) -> None:
    waited = 20
    env = {"FABRIC_CORE_RENDEZVOUS_TIMEOUT": str(waited)}
    jobs = elastic(two_nodes, restarts=2, steps=40, rdzv_id="lost", env=env)
    wait_for_line(jobs, r"^step 8 ")
    jobs[1].kill()
    killed = time.monotonic()
    code = jobs[0].wait(JOB_DEADLINE)
    # The workers fail on the lost peers at once, the agent restarts them once into a rendezvous that waits
    # `waited` seconds for the second node, and gives up naming it.
    assert code != 0 and time.monotonic() - killed < waited + 40, jobs[0].output[-4000:]
    assert re.search(r"could not meet node\(s\) 1\b.*within 20 s", jobs[0].output), jobs[0].output[-4000:]
    assert not jobs[0].alive_tree()
