"""Two machines on one: network namespaces joined by a veth pair stand in for two hosts.

The fixture :func:`two_nodes` gives a :class:`Cluster` of two :class:`Node` objects. Each node is a network
namespace with one end of a veth pair (``10.77.0.1`` and ``10.77.0.2``) and its own loopback, plus a UTS and a
mount namespace held open by a small keeper process (``sleep``), so that every command entered into the node
sees the same host name, ``/etc/hosts`` and disk:

- ``hostname``: the node's host name (``node0``, ``node1``), set in its own UTS namespace;
- ``hosts``: what the host name resolves to in the node's own ``/etc/hosts`` (bind-mounted over the real one):
  ``"loopback"`` (127.0.0.1, as Debian and many containers do: the default, and the hard case) or ``"own"`` (the
  node's own 10.x address, with the other node's name too, as a cluster's DNS would);
- ``disk``: ``"shared"`` (``cluster.disk`` is one folder both nodes see) or ``"per-node"`` (each node mounts a
  tmpfs of its own at that same path, so what one node writes there the other never sees).

Commands run with :meth:`Node.start` (``nsenter`` into the keeper's namespaces); :meth:`Job.wait` has a deadline
and collects the exit code and the output; :meth:`Job.kill` signals the job's whole process tree (the launcher
and the workers it started in sessions of their own). :meth:`Cluster.fabric_run` starts ``fabric-core run
--num-nodes 2 --node-rank R --main-address <node 0>`` on both nodes. Everything a test started is killed, the
namespaces deleted and the mounts gone when the test ends, whether it passed or not.

The tests skip, saying why, where the process is not root or ``ip``/``unshare``/``nsenter`` are missing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Network namespaces and veth ends made here are named ``fcmn<pid>x<n>...``; leftovers of a dead pid are removed.
PREFIX = "fcmn"
SUBNET = "10.77.0"
_counter = itertools.count()
_TOOLS = ("ip", "unshare", "nsenter")


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, ... (from /proc), found before any of them is signalled."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@dataclass
class Job:
    """A command running in one node; its output goes to ``log`` (stdout and stderr together)."""

    node: Node
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)
    returncode: int | None = None
    wall: float | None = None

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tree(self) -> list[int]:
        """The job's process and everything it started (torchrun's workers sit in sessions of their own)."""
        return [self.process.pid, *descendants(self.process.pid)]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the whole process tree of the job (a node that dies whole)."""
        _signal(self.tree(), sig)

    def wait(self, deadline: float) -> int:
        """Wait at most ``deadline`` seconds for the job to end; kill its tree and fail the test if it does not.

        Returns:
            The exit code. :attr:`wall` holds the seconds from start to exit.
        """
        try:
            self.returncode = self.process.wait(timeout=max(0.0, self.started + deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait(timeout=30)
            raise AssertionError(
                f"{self.name} on {self.node.hostname} still ran {deadline:g} s after it started; killed it. Output:\n"
                + self.output[-6000:]
            ) from None
        self.wall = time.monotonic() - self.started
        return self.returncode

    def alive_tree(self) -> list[int]:
        """The job's processes that are still running (zombies count as gone)."""
        return [pid for pid in self.tree() if _running(pid)]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@dataclass
class Node:
    """One host: a network namespace, plus a host name, ``/etc/hosts`` and a disk held by a keeper process."""

    rank: int
    netns: str
    address: str
    interface: str
    hostname: str
    keeper: subprocess.Popen[bytes]
    logs: Path
    jobs: list[Job] = field(default_factory=list)

    def command(self, argv: Sequence[str], cwd: Path = ROOT) -> list[str]:
        """``argv`` entered into this node's namespaces (network, host name, mounts), run in ``cwd``."""
        pid = str(self.keeper.pid)
        return ["nsenter", "-t", pid, "--net", "--uts", "--mount", f"--wd={cwd}", "--", *argv]

    def start(self, argv: Sequence[str], *, name: str = "job", env: dict[str, str] | None = None) -> Job:
        """Start ``argv`` in this node, in a session of its own; stdout and stderr go to a per-node log file."""
        log = self.logs / f"{self.hostname}-{name}-{len(self.jobs)}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                self.command(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env if env is not None else clean_environment(),
                start_new_session=True,
            )
        job = Job(self, name, list(argv), process, log)
        self.jobs.append(job)
        return job

    def run(self, argv: Sequence[str], *, deadline: float = 30, env: dict[str, str] | None = None) -> Job:
        """Run ``argv`` to its end (within ``deadline`` seconds)."""
        job = self.start(argv, name="run", env=env)
        job.wait(deadline)
        return job


def clean_environment(**extra: str) -> dict[str, str]:
    """This environment without what places a process in a job (a leak would join it to the wrong one)."""
    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
    skip += ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "PYTEST_")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(skip)}, **extra}


@dataclass
class Cluster:
    """Two nodes joined by a veth pair; ``disk`` is the folder checkpoints go to (shared or per node)."""

    nodes: list[Node]
    disk: Path
    per_node_disk: bool

    @property
    def main_address(self) -> str:
        return self.nodes[0].address

    def fabric_run(
        self,
        script_and_args: Sequence[str],
        *,
        devices: int = 2,
        options: Sequence[str] = ("--accelerator", "cpu", "--strategy", "ddp"),
        main_address: Sequence[str | None] | None = None,
        env: dict[str, str] | None = None,
        nodes: Sequence[int] = (0, 1),
        name: str = "run",
    ) -> list[Job]:
        """Start ``fabric-core run --num-nodes 2 --node-rank R --main-address A --devices N`` on the given nodes.

        Args:
            main_address: Per node, the ``--main-address`` it is given (default node 0's address on both).
        """
        jobs = []
        for rank in nodes:
            node = self.nodes[rank]
            address = main_address[rank] if main_address is not None else self.main_address
            argv = [sys.executable, "-m", "fabric_core", "run", "--num-nodes", "2", "--node-rank", str(rank)]
            if address is not None:
                argv += ["--main-address", address]
            argv += ["--devices", str(devices), *options, *script_and_args]
            jobs.append(node.start(argv, name=name, env=clean_environment(**(env or {}))))
        return jobs

    def kill_all(self) -> None:
        for node in self.nodes:
            for job in node.jobs:
                job.kill()
        for node in self.nodes:
            for job in node.jobs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    job.process.wait(timeout=30)


def _missing_capability() -> str | None:
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "making network namespaces needs root (run the multinode tests as root, as CI does)"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (install iproute2 and util-linux)"
    return None


def _remove_leftovers() -> None:
    """Namespaces a killed test session left behind (its pid is in the name and is gone)."""
    listing = _sh("ip", "netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].split("x", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _sh("ip", "netns", "del", name, check=False)


def _hosts_file(path: Path, node: int, hostnames: list[str], addresses: list[str], mode: str) -> Path:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    if mode == "loopback":
        lines.append(f"127.0.0.1\t{hostnames[node]}")
    else:
        lines += [f"{address}\t{name}" for name, address in zip(hostnames, addresses)]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_cluster(tmp_path: Path, *, hosts: str = "loopback", disk: str = "shared") -> Iterator[Cluster]:
    """Make two nodes (see the module's docstring); remove everything when the generator is closed."""
    if hosts not in ("loopback", "own"):
        raise ValueError(f"hosts={hosts!r}: expected 'loopback' or 'own'")
    if disk not in ("shared", "per-node"):
        raise ValueError(f"disk={disk!r}: expected 'shared' or 'per-node'")
    reason = _missing_capability()
    if reason is not None:
        pytest.skip(reason)
    _remove_leftovers()
    tag = f"{PREFIX}{os.getpid()}x{next(_counter)}"
    netns = [f"{tag}n0", f"{tag}n1"]
    veth = [f"{tag}v0"[-15:], f"{tag}v1"[-15:]]  # interface names have at most 15 characters
    addresses = [f"{SUBNET}.1", f"{SUBNET}.2"]
    hostnames = ["node0", "node1"]
    shared = tmp_path / "disk"
    shared.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    made: list[str] = []
    nodes: list[Node] = []
    try:
        try:
            for name in netns:
                _sh("ip", "netns", "add", name)
                made.append(name)
        except RuntimeError as error:
            pytest.skip(f"cannot make network namespaces here: {error}")
        _sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for rank in (0, 1):
            _sh("ip", "link", "set", veth[rank], "netns", netns[rank])
            _sh("ip", "-n", netns[rank], "addr", "add", f"{addresses[rank]}/24", "dev", veth[rank])
            _sh("ip", "-n", netns[rank], "link", "set", veth[rank], "up")
            _sh("ip", "-n", netns[rank], "link", "set", "lo", "up")
        for rank in (0, 1):
            hosts_file = _hosts_file(tmp_path / f"hosts{rank}", rank, hostnames, addresses, hosts)
            setup = [f"hostname {hostnames[rank]}", f"mount --bind {hosts_file} /etc/hosts"]
            if disk == "per-node":
                setup.append(f"mount -t tmpfs -o size=256m fabric-core-node{rank} {shared}")
            script = " && ".join(setup) + " && echo ready && exec sleep 86400"
            enter = ["ip", "netns", "exec", netns[rank], "unshare", "--uts", "--mount", "--propagation", "private"]
            keeper = subprocess.Popen(
                [*enter, "sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            assert keeper.stdout is not None
            line = keeper.stdout.readline()
            if line.strip() != b"ready":
                keeper.kill()
                _, err = keeper.communicate(timeout=30)
                raise RuntimeError(f"node {rank} did not come up: {err.decode(errors='replace').strip()}")
            nodes.append(Node(rank, netns[rank], addresses[rank], veth[rank], hostnames[rank], keeper, logs))
        cluster = Cluster(nodes, shared, per_node_disk=disk == "per-node")
        yield cluster
    finally:
        for node in nodes:
            for job in node.jobs:
                job.kill()
        for node in nodes:
            for job in node.jobs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    job.process.wait(timeout=30)
            node.keeper.kill()
            node.keeper.wait(timeout=30)
        for name in made:
            _sh("ip", "netns", "del", name, check=False)


@pytest.fixture
def two_nodes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two nodes whose host names resolve to 127.0.0.1, sharing one disk.

    Parametrise indirectly for other set-ups: ``@pytest.mark.parametrize("two_nodes", [{"hosts": "own",
    "disk": "per-node"}], indirect=True)``.
    """
    options = getattr(request, "param", {}) or {}
    yield from make_cluster(tmp_path, **options)


@pytest.fixture(scope="session")
def one_node_digest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final digest of ``fabric-core run --devices 4 --strategy ddp examples/fault_tolerant.py --steps 20
    --every 5`` on this machine alone: what a two-node run of 2 + 2 processes must end with."""
    folder = tmp_path_factory.mktemp("one_node")
    command = [sys.executable, "-m", "fabric_core", "run", "--accelerator", "cpu", "--devices", "4", "--strategy"]
    command += ["ddp", "examples/fault_tolerant.py", "--steps", "20", "--every", "5", "--dir", str(folder / "run")]
    result = subprocess.run(command, cwd=ROOT, env=clean_environment(), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-4000:]
    found = re.findall(r"final digest: ([0-9a-f]{64})", result.stdout)
    assert found, result.stdout[-4000:]
    return found[-1]
