"""Two-node jobs over a real network: two network namespaces joined by a veth pair (see conftest.py).

Every node's host name resolves to 127.0.0.1 unless a test says otherwise (Debian's and many containers'
``/etc/hosts``), and no interface variable is set: the job must find its network by itself. Each job runs
``examples/fault_tolerant.py`` (4 processes in all, gloo) and is compared with the same command on one node of 4.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.multinode, pytest.mark.multiprocess]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/fault_tolerant.py"
#: The bound every process of a job keeps when a rank fails while the processes meet (docs/multi-node.md).
FAILURE_BOUND = 60
# Generous: 4 processes importing torch on 2 cores take ~25 s to train 20 steps.
JOB_DEADLINE = 180


def digest(output: str) -> str:
    found = re.findall(r"final digest: ([0-9a-f]{64})", output)
    assert found, f"no final digest in:\n{output[-4000:]}"
    return found[-1]


def test_two_nodes_train_to_the_digest_of_one_node_of_four(two_nodes, one_node_digest: str) -> None:
    jobs = two_nodes.fabric_run([EXAMPLE, "--steps", "20", "--every", "5", "--dir", str(two_nodes.disk / "run")])
    for job in jobs:
        assert job.wait(JOB_DEADLINE) == 0, job.output[-4000:]
        # Found by itself: the host name resolves to loopback, so the interface that routes to node 0 is used.
        assert "resolves to a loopback address" in job.output
        assert f"interface {two_nodes.nodes[job.node.rank].interface}" in job.output
    assert digest(jobs[0].output) == one_node_digest


def test_elastic_rendezvous_where_host_names_resolve_to_loopback(two_nodes, one_node_digest: str) -> None:
    """torch's own host check fails here (the endpoint is not the host name's address): node 0 must still host."""
    options = ("--accelerator", "cpu", "--strategy", "ddp", "--rdzv-endpoint", f"{two_nodes.main_address}:29500")
    options += ("--rdzv-id", "job2")
    jobs = two_nodes.fabric_run(
        [EXAMPLE, "--steps", "20", "--every", "5", "--dir", str(two_nodes.disk / "run")],
        options=options,
        main_address=[None, None],
    )
    for job in jobs:
        assert job.wait(JOB_DEADLINE) == 0, job.output[-4000:]
        assert f"its address is {job.node.address} (--local-addr)" in job.output
    assert "hosts the rendezvous store" in jobs[0].output
    assert "hosts the rendezvous store" not in jobs[1].output
    assert digest(jobs[0].output) == one_node_digest


def test_a_run_resumes_from_a_disk_both_nodes_share(two_nodes, one_node_digest: str) -> None:
    run = str(two_nodes.disk / "run")
    for job in two_nodes.fabric_run([EXAMPLE, "--steps", "10", "--every", "5", "--dir", run]):
        assert job.wait(JOB_DEADLINE) == 0, job.output[-4000:]
    resumed = two_nodes.fabric_run([EXAMPLE, "--steps", "20", "--every", "5", "--dir", run])
    for job in resumed:
        assert job.wait(JOB_DEADLINE) == 0, job.output[-4000:]
        assert "resumed at step 10" in job.output  # both nodes, not one resuming and one starting over
        assert "starting at step 0" not in job.output
    assert digest(resumed[0].output) == one_node_digest


@pytest.mark.parametrize("two_nodes", [{"disk": "per-node"}], indirect=True)
def test_a_resume_from_disks_of_each_node_own_fails_on_every_node_naming_why(two_nodes) -> None:
    """Rank 0 alone writes a single-file checkpoint: on per-node disks node 1 has none, and must not start over."""
    run = two_nodes.disk / "run"
    for job in two_nodes.fabric_run([EXAMPLE, "--steps", "10", "--every", "5", "--dir", str(run)]):
        assert job.wait(JOB_DEADLINE) == 0, job.output[-4000:]
    listing = [node.run(["ls", str(two_nodes.disk)]).output.split() for node in two_nodes.nodes]
    assert listing == [["run"], []]  # really two disks: what node 0 wrote, node 1 does not see

    resumed = two_nodes.fabric_run([EXAMPLE, "--steps", "20", "--every", "5", "--dir", str(run)])
    for job in resumed:
        assert job.wait(JOB_DEADLINE) != 0
        assert "ranks 2, 3 (node 1) cannot see this checkpoint, which ranks 0, 1 (node 0) can" in job.output
        assert "filesystem that every node mounts" in job.output
        assert "starting at step 0" not in job.output and "step 11 loss" not in job.output
    assert abs(resumed[0].wall - resumed[1].wall) < FAILURE_BOUND


def test_a_node_that_never_arrives_ends_node_0_within_the_rendezvous_timeout(two_nodes) -> None:
    timeout = 5
    (job,) = two_nodes.fabric_run(
        [EXAMPLE, "--steps", "20"], nodes=[0], env={"FABRIC_CORE_RENDEZVOUS_TIMEOUT": str(timeout)}
    )
    assert job.wait(timeout + 60) == 1
    assert job.wall is not None and job.wall >= timeout
    message = f"node 0 of 2 could not meet node(s) 1 at {two_nodes.main_address}:29400 within {timeout} s"
    assert message in job.output, job.output[-4000:]
    assert "1/2 clients joined" in job.output  # the cause, in torch's words
    assert "Traceback" not in job.output


def test_a_node_given_a_wrong_main_address_ends_both_nodes_naming_the_address(two_nodes) -> None:
    timeout = 5
    jobs = two_nodes.fabric_run(
        [EXAMPLE, "--steps", "20"],
        main_address=[two_nodes.main_address, two_nodes.nodes[1].address],  # node 1 told that it is node 0
        env={"FABRIC_CORE_RENDEZVOUS_TIMEOUT": str(timeout)},
    )
    for job in jobs:
        assert job.wait(timeout + 60) == 1
    assert "node 0 of 2 could not meet node(s) 1" in jobs[0].output
    assert f"node 1 of 2 could not meet node(s) 0 at {two_nodes.nodes[1].address}:29400" in jobs[1].output


def test_a_rank_that_fails_while_meeting_ends_every_process_on_every_node(two_nodes) -> None:
    """Node 1's ranks fail creating gloo's device (a misnamed interface); node 0's, waiting for them, stop too.

    The rendezvous timeout stays at its default (120 s): only the failure record can end node 0 this soon.
    """
    started = time.monotonic()
    jobs = two_nodes.fabric_run([EXAMPLE, "--steps", "20"], nodes=[0])
    jobs += two_nodes.fabric_run([EXAMPLE, "--steps", "20"], nodes=[1], env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    for job in jobs:
        assert job.wait(FAILURE_BOUND + 30) != 0, job.output[-4000:]
    assert time.monotonic() - started < FAILURE_BOUND
    assert all(not job.alive_tree() for job in jobs)
    node0 = jobs[0].output
    stops = r"rank [01] of 4 \(node 0, host node0, pid \d+\) stops: rank [23] of 4 \(node 1, host node1"
    assert re.search(stops, node0), node0[-4000:]
    assert "failed while the processes met" in node0 and "nosuch0" in node0, node0[-4000:]
