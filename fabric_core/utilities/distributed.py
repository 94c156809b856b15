"""Questions about the processes of a job that need all of them to answer (collective; call on every rank)."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fabric_core._deferred import lightning_reexports, reexports

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
        "_InfiniteBarrier": f"{_PG}:InfiniteBarrier",
        "_all_gather_ddp_if_available": f"{_PG}:all_gather_if_available",
        "_destroy_dist_connection": f"{_PG}:destroy_process_group",
        "_distributed_is_initialized": f"{_PG}:distributed_is_initialized",
        "_gather_all_tensors": f"{_PG}:gather_all_tensors",
        "_get_default_process_group_backend_for_device": f"{_PG}:default_backend_for_device",
        "_init_dist_connection": f"{_PG}:init_process_group_from_environment",
        "_is_dtensor": f"{_PG}:is_dtensor",
        "_set_num_threads_if_needed": f"{_PG}:set_num_threads_if_needed",
        "_simple_gather_all_tensors": f"{_PG}:_simple_gather_all_tensors",
        "_suggested_max_num_threads": f"{_PG}:suggested_max_num_threads",
        "_sync_ddp": f"{_PG}:sync",
        "_sync_ddp_if_available": f"{_PG}:sync_if_available",
        "group": f"{_PG}:group",
    },
    fallback=lightning_reexports(__name__),
)


_T = TypeVar("_T")
_PROBE_PREFIX = ".fabric_core_shared_fs."


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
        ``True`` for a single process, or when all processes see the same folder.

    Raises:
        FileNotFoundError: ``path`` does not exist on some process (named by the message on that rank).
        ValueError: ``timeout`` is negative.
    """
    if timeout < 0:
        raise ValueError(f"`is_shared_filesystem(timeout={timeout!r})`: the timeout must be 0 or more seconds.")
    if strategy.world_size <= 1:
        return True
    folder = Path.cwd() if path is None else Path(path)
    folder = folder.parent if folder.is_file() else folder
    if not strategy.reduce_boolean_decision(folder.is_dir(), all=True):
        where = "here" if not folder.is_dir() else "on another process"
        raise FileNotFoundError(
            f"`is_shared_filesystem(path={os.fspath(folder)!r})`: the folder does not exist {where}; it must exist "
            "on every node."
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
