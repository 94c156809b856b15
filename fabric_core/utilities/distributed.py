"""Questions about the processes of a job that need all of them to answer (collective; call on every rank).

Also Lightning's helpers at this path that code calls and Lightning's tests patch here: joining and leaving the
default process group (``_init_dist_connection``), the threads per process (``_set_num_threads_if_needed``) and
the barrier that never times out (``_InfiniteBarrier``). They read ``torch``, ``atexit``,
``_num_cpus_available`` and ``_distributed_is_initialized`` as this module's globals, at call time.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from fabric_core._deferred import lightning_reexports, reexports
from fabric_core.utilities.data import _num_cpus_available
from fabric_core.utilities.imports import _TORCH_GREATER_EQUAL_2_4
from fabric_core.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fabric_core.utilities.data import DistributedSamplerWrapper

__all__ = ["DistributedSamplerWrapper", "is_shared_filesystem"]


_PG = "fabric_core.utilities._process_group"
# Lightning's names at this path whose code lives elsewhere (loaded on use: torch), then those it re-exports.
__getattr__ = reexports(
    __name__,
    {
        "DistributedSamplerWrapper": "fabric_core.utilities.data",
        "_DatasetSamplerWrapper": "fabric_core.utilities.data:_SamplerIndices",
        "_all_gather_ddp_if_available": f"{_PG}:all_gather_if_available",
        "_gather_all_tensors": f"{_PG}:gather_all_tensors",
        "_get_default_process_group_backend_for_device": f"{_PG}:default_backend_for_device",
        "_simple_gather_all_tensors": f"{_PG}:_simple_gather_all_tensors",
        "_sync_ddp": f"{_PG}:sync",
        "_sync_ddp_if_available": f"{_PG}:sync_if_available",
        "group": f"{_PG}:group",
    },
    fallback=lightning_reexports(__name__),
)


_T = TypeVar("_T")
_PROBE_PREFIX = ".fabric_core_shared_fs."
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


class _Processes(Protocol):
    """What :func:`is_shared_filesystem` needs of a strategy (``node_rank``, ``local_rank`` and
    ``num_nodes`` are read where the strategy has them; one node, local rank = global rank otherwise)."""

    @property
    def world_size(self) -> int: ...

    @property
    def global_rank(self) -> int: ...

    def broadcast(self, obj: _T, src: int = 0) -> _T: ...

    def barrier(self, name: str | None = None) -> None: ...

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool: ...


def _layout(strategy: Any) -> tuple[int, int, int]:
    """``(node_rank, local_rank, num_nodes)`` of this process."""
    node = int(getattr(strategy, "node_rank", 0))
    local = int(getattr(strategy, "local_rank", strategy.global_rank))
    return node, local, max(1, int(getattr(strategy, "num_nodes", 1)))


def is_shared_filesystem(
    strategy: _Processes, path: str | os.PathLike[str] | None = None, timeout: float = 3.0
) -> bool:
    """Whether every process of the job sees the same folder at ``path`` (one filesystem shared by all nodes).

    Call it on every rank; all get the same answer. The first process of each node creates a probe file
    with a name unique to this call in the folder; after a barrier every process looks for the probes of
    all nodes, for up to ``timeout`` seconds (a network filesystem can show a file created elsewhere a
    moment later). Shared only if every process sees every probe. The probes are removed before returning.

    Args:
        strategy: The strategy of the job (``fabric.strategy``).
        path: A folder (or a file, for its folder) that exists on every node and may be written; the
            current working folder by default.
        timeout: How long a process waits for the probes of other nodes before deciding "not shared".

    Returns:
        ``True`` for a single process, a remote URL (``s3://...``), or when all processes see the same folder;
        ``False`` also when the processes pass different paths (as in Lightning).

    Raises:
        FileNotFoundError: ``path`` does not exist on some process (named by the message on that rank).
        ValueError: ``timeout`` is negative.
    """
    if timeout < 0:
        raise ValueError(f"`is_shared_filesystem(timeout={timeout!r})`: the timeout must be 0 or more seconds.")
    if path is not None and _URL.match(os.fspath(path)) and not os.fspath(path).startswith("file://"):
        return True  # an object store or another remote filesystem: every process reaches the same one
    if strategy.world_size <= 1:
        return True
    target = Path(Path.cwd() if path is None else path).resolve()
    if not strategy.reduce_boolean_decision(strategy.broadcast(target, src=0) == target, all=True):
        return False  # the processes asked about different paths
    folder = target.parent if target.is_file() else target
    if not strategy.reduce_boolean_decision(folder.is_dir(), all=True):
        where = "here" if not folder.is_dir() else "on another process"
        raise FileNotFoundError(
            "Unable to determine if the path belongs to a shared filesystem. The path does not exist: "
            f"`is_shared_filesystem(path={os.fspath(folder)!r})` found no such folder {where}; it must exist on "
            "every node."
        )
    node, local, num_nodes = _layout(strategy)
    # Unique to this call, so that concurrent checks of one folder and a killed check's leftovers never count.
    token = strategy.broadcast(secrets.token_hex(8) if strategy.global_rank == 0 else "", src=0)
    probe = folder / f"{_PROBE_PREFIX}{token}.node{node}"
    if local == 0:
        probe.touch()
    try:
        strategy.barrier("is_shared_filesystem")
        # Looked up by name, not listed: a network filesystem may answer a listing from its cache, while
        # a name never looked up before is asked of the server.
        expected = [folder / f"{_PROBE_PREFIX}{token}.node{n}" for n in range(num_nodes)]
        deadline = time.monotonic() + timeout
        while True:
            expected = [name for name in expected if not name.exists()]
            seen = not expected
            if seen or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        return strategy.reduce_boolean_decision(seen, all=True)
    finally:
        if local == 0:
            with contextlib.suppress(OSError):
                probe.unlink()


# -- Lightning's helpers at this path -----------------------------------------------------------------------
_FOREVER = timedelta(days=10000)


class _Rendezvous(Protocol):
    """What :func:`_init_dist_connection` reads of a cluster environment."""

    @property
    def main_address(self) -> str: ...

    @property
    def main_port(self) -> int: ...

    def global_rank(self) -> int: ...

    def world_size(self) -> int: ...


def _distributed_is_initialized() -> bool:
    """Whether a default process group exists (torch may be built without distributed support)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _is_dtensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a DTensor (what presents itself as one counts, as for ``isinstance``).

    Lightning's helper: it reads ``_TORCH_GREATER_EQUAL_2_4`` here at call time (before torch 2.4 nothing is a
    DTensor to Lightning's code), so that a test that patches the flag sees the answer Lightning gives. It is
    answered without importing DTensor where nothing created one yet.
    """
    module = sys.modules.get("torch.distributed.tensor")
    return _TORCH_GREATER_EQUAL_2_4 and module is not None and isinstance(tensor, module.DTensor)


def _suggested_max_num_threads(num_processes: int = 1) -> int:
    """The CPU threads each of ``num_processes`` processes on this machine may use (at least 1).

    Raises:
        ValueError: ``num_processes`` < 1.
    """
    if num_processes < 1:
        raise ValueError(f"`num_processes` should be >= 1, got {num_processes}.")
    return max(1, _num_cpus_available() // num_processes)


def _set_num_threads_if_needed(num_processes: int = 1) -> None:
    """Share the CPUs among ``num_processes`` processes, unless ``OMP_NUM_THREADS`` says how many already."""
    if "OMP_NUM_THREADS" not in os.environ:
        threads = _suggested_max_num_threads(num_processes)
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def _init_dist_connection(
    cluster_environment: _Rendezvous,
    torch_distributed_backend: str,
    global_rank: int | None = None,
    world_size: int | None = None,
    **kwargs: Any,
) -> None:
    """Create the default process group from a cluster environment's address, port, rank and world size.

    Nothing happens when a group exists already. ``MASTER_ADDR``/``MASTER_PORT`` are set from the environment,
    as ``torch.distributed`` reads them. An NCCL group is destroyed at exit.

    Raises:
        RuntimeError: This torch build has no ``torch.distributed``.
    """
    if not torch.distributed.is_available():
        raise RuntimeError("torch.distributed is not available. Cannot initialize distributed process group")
    if torch.distributed.is_initialized():
        return
    rank = cluster_environment.global_rank() if global_rank is None else global_rank
    size = cluster_environment.world_size() if world_size is None else world_size
    os.environ["MASTER_ADDR"] = cluster_environment.main_address
    os.environ["MASTER_PORT"] = str(cluster_environment.main_port)
    torch.distributed.init_process_group(torch_distributed_backend, rank=rank, world_size=size, **kwargs)
    if torch_distributed_backend == "nccl":
        atexit.register(_destroy_dist_connection)
    rank_zero_info(f"Initialized distributed: backend={torch_distributed_backend}, {size} processes")


def _destroy_dist_connection() -> None:
    """Destroy the default process group, if any, with Ctrl-C ignored meanwhile."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if _distributed_is_initialized():
            torch.distributed.destroy_process_group()
    finally:
        signal.signal(signal.SIGINT, previous)


class _InfiniteBarrier:
    """A barrier that never times out, on a gloo group of its own (``with _InfiniteBarrier() as barrier``).

    Calling it waits for every rank; leaving the block waits once more and releases the group. Without a process
    group it does nothing. ``fabric.rank_zero_first()`` waits with it (a rank may download data for hours).
    """

    def __init__(self) -> None:
        self.group: Any = None
        self.barrier: Any = lambda: None

    def __call__(self) -> None:
        self.barrier()

    def __enter__(self) -> _InfiniteBarrier:
        if _distributed_is_initialized():
            self.group = torch.distributed.new_group(backend="gloo", timeout=_FOREVER)
            self.barrier = self.group.monitored_barrier  # the group's own timeout: forever
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        group, self.group = self.group, None
        if group is None:
            return
        try:
            self.barrier()
        finally:
            torch.distributed.destroy_process_group(group)
