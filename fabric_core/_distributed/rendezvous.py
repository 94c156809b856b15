"""Creating the process group with a rendezvous bounded by seconds, and errors that name the variables."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any, Final

import torch.distributed as dist

from fabric_core._distributed.network import choose_interface
from fabric_core._distributed.rendezvous_watch import Meeting
from fabric_core.environments._env import check_address, check_port, read_seconds, resolve_address
from fabric_core.errors import InvalidConfigError, RendezvousError

__all__ = ["RENDEZVOUS_TIMEOUT_VARIABLE", "init_process_group", "rendezvous_timeout"]

#: Seconds the processes of a job wait for each other to create the process group.
RENDEZVOUS_TIMEOUT_VARIABLE: Final = "FABRIC_CORE_RENDEZVOUS_TIMEOUT"
# Long enough for the workers of a node to import torch on a busy machine; a job whose processes start
# minutes apart (nodes started by hand) sets the variable.
_DEFAULT_SECONDS: Final = 120.0
_PLACEMENT: Final = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "RANK")


def rendezvous_timeout() -> timedelta:
    """:data:`RENDEZVOUS_TIMEOUT_VARIABLE` (default 120 s).

    Raises:
        InvalidConfigError: The variable is not a positive number of seconds.
    """
    meaning = f"how long the processes wait for each other at start; default {_DEFAULT_SECONDS:.0f}"
    return timedelta(seconds=read_seconds(RENDEZVOUS_TIMEOUT_VARIABLE, _DEFAULT_SECONDS, meaning))


def init_process_group(
    backend: str,
    *,
    address: str,
    port: int,
    rank: int,
    world_size: int,
    timeout: timedelta,
    port_chosen_here: bool,
    **kwargs: Any,
) -> None:
    """Create the default process group at ``address:port``; the meeting itself waits at most the rendezvous
    timeout, after which the group's collectives get ``timeout``.

    Args:
        backend: ``"gloo"``, ``"nccl"``, ...
        address: Where rank 0 listens (``MASTER_ADDR``).
        port: Its port (``MASTER_PORT``).
        rank: This process's global rank.
        world_size: The number of processes.
        timeout: The collectives' timeout.
        port_chosen_here: The cluster environment picked ``port`` in this process just now, so no other
            process can know it.
        kwargs: Passed on to ``torch.distributed.init_process_group``.

    Raises:
        InvalidConfigError: A malformed address or port, or a rank other than 0 with a port chosen here.
        RendezvousError: The processes did not all meet within the rendezvous timeout.
    """
    check_address(address)
    check_port(port)
    if rank != 0 and port_chosen_here:
        raise InvalidConfigError(
            f"This process is rank {rank} of {world_size}{_local_rank_note()}, but MASTER_PORT is not set, so "
            "it cannot know where rank 0 waits. Start the job with `fabric-core run` or torchrun, which set "
            "both, or unset LOCAL_RANK to let `fabric.launch()` start the processes.",
            argument="LOCAL_RANK" if "LOCAL_RANK" in os.environ else "MASTER_PORT",
            value=os.environ.get("LOCAL_RANK"),
        )
    resolve_address(address, port)
    _choose_interface(address)
    meeting = rendezvous_timeout()
    watch = _watch(address, port, rank, world_size)
    try:
        with watch:
            try:
                store = _attempt_store(address, port, world_size, min(meeting, timeout))
                if store is not None:
                    kwargs["store"] = store
                dist.init_process_group(
                    backend, rank=rank, world_size=world_size, timeout=min(meeting, timeout), **kwargs
                )
            except Exception as error:
                watch.fail(f"{type(error).__name__}: {_first_line(error)}")
                raise
    except Exception as error:
        missing = watch.missing()
        absent = f" Never arrived: {_ranks_by_node(missing, world_size)}." if missing else ""
        raise RendezvousError(
            f"Rank {rank} of {world_size}{_local_rank_note()} could not meet the other processes at "
            f"{address}:{port} within {meeting.total_seconds():g} s ({RENDEZVOUS_TIMEOUT_VARIABLE}). Some "
            f"processes were not started, started with other values, or failed.{absent} This process has "
            f"{_placement()}. ({type(error).__name__}: {_first_line(error)})"
        ) from error
    if meeting < timeout and dist.is_initialized():  # not when a test mocks init_process_group
        # The meeting is over: collectives (and NCCL's lazy connection setup, through the store) get the
        # job's timeout, not the rendezvous one.
        dist.distributed_c10d._set_pg_timeout(timeout)
        dist.distributed_c10d._get_default_store().set_timeout(timeout)


def _choose_interface(address: str) -> None:
    """Set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME where the host name resolves to loopback (see ``network``)."""
    choice = choose_interface(address)
    if choice is None:
        return
    for name in choice.variables:
        os.environ[name] = choice.interface
    if os.environ.get("LOCAL_RANK", "0") == "0":  # one line per node
        print(choice.describe(), file=sys.stderr, flush=True)


def _watch(address: str, port: int, rank: int, world_size: int) -> Any:
    """A :class:`Meeting` under an elastic agent, whose store exists already; elsewhere a no-op."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return _NoWatch()
    return Meeting(address, port, rank, world_size, _attempt_prefix())


class _NoWatch:
    def __enter__(self) -> _NoWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def fail(self, cause: str) -> None:
        return None

    def missing(self) -> list[int]:
        return []


def _ranks_by_node(ranks: list[int], world_size: int) -> str:
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "0") or 0)
    if per_node < 1 or world_size % per_node:
        return "ranks " + ", ".join(map(str, ranks))
    nodes: dict[int, list[int]] = {}
    for r in ranks:
        nodes.setdefault(r // per_node, []).append(r)
    return "; ".join(f"node {node} (ranks {', '.join(map(str, rs))})" for node, rs in sorted(nodes.items()))


def _attempt_prefix() -> str:
    return f"/fabric_core/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def _attempt_store(address: str, port: int, world_size: int, timeout: timedelta) -> Any:
    """The elastic agent's store, under a prefix of its own for this attempt; ``None`` outside such an agent.

    torchrun (and ``fabric-core run``) keep one store for the whole job and restart the workers with
    ``TORCHELASTIC_RESTART_COUNT`` one higher. torch's ``env://`` joins that store without a prefix, so the
    workers of a restart would read the addresses the dead attempt published and fail to connect (gloo:
    "Connection refused"). Keying every attempt apart makes a restart meet only its own peers.

    Returns:
        A ``torch.distributed.PrefixStore`` for ``init_process_group(store=...)``, or ``None``.
    """
    from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]  # not in torch's __all__

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = TCPStore(address, port, world_size, is_master=False, timeout=timeout)
    return PrefixStore(_attempt_prefix(), store)


def _local_rank_note() -> str:
    return f" (LOCAL_RANK={os.environ['LOCAL_RANK']})" if "LOCAL_RANK" in os.environ else ""


def _placement() -> str:
    return ", ".join(f"{name}={os.environ[name]}" if name in os.environ else f"{name} unset" for name in _PLACEMENT)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
