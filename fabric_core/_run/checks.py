"""What ``fabric-core run`` decides before it starts any process: the process count and the rendezvous.

Both refuse a contradiction with :class:`InvalidConfigError` (the CLI prints it and exits with status 2), so
a job that cannot run never starts a worker.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Mapping
from typing import Final

from fabric_core._kernel.manager import PluginManager
from fabric_core.errors import InvalidConfigError

__all__ = [
    "MONITOR_INTERVAL",
    "MULTI_NODE_PORT",
    "RDZV_BACKENDS",
    "elastic_options",
    "num_processes",
    "rdzv_conf",
    "rendezvous_options",
]

#: The port of node 0 when several nodes must agree on one and none was given.
MULTI_NODE_PORT: Final = 29400
#: Seconds between the elastic agent's looks at its workers (torchrun's default): a dead worker is
#: noticed within this long.
MONITOR_INTERVAL: Final = 0.1
#: The rendezvous backends torch's elastic agent registers.
RDZV_BACKENDS: Final = ("c10d", "static", "etcd", "etcd-v2")
_DEFAULT_ADDRESS: Final = "127.0.0.1"


def num_processes(manager: PluginManager, args: argparse.Namespace) -> int:
    """Resolve the options exactly as ``Fabric(...)`` will in each worker, and return the processes per node.

    Args:
        manager: The plugin manager the names resolve in.
        args: The parsed ``fabric-core run`` options.

    Raises:
        InvalidConfigError: A value ``Fabric(...)`` would refuse (``--devices -1`` on cpu, ``--devices 0``,
            ``--num-nodes 0``, ...), or a strategy that runs one process asked to run several.
    """
    from fabric_core._kernel.selection import select
    from fabric_core.strategies.parallel import ParallelStrategy

    try:
        selection = select(
            manager,
            accelerator=args.accelerator or "auto",
            strategy=args.strategy or "auto",
            devices=args.devices,
            num_nodes=args.num_nodes,
            precision=args.precision,
            environ={},  # the command line alone decides; a leaked FABRIC_CORE_* variable must not
        )
    except InvalidConfigError as exc:
        hint = ""
        if str(args.devices).strip() == "-1":
            hint = " (`--devices -1` means every GPU; on this accelerator give a count >= 1, or 'auto')"
        raise InvalidConfigError(
            f"`--devices {args.devices} --num-nodes {args.num_nodes}`: {exc}{hint}",
            argument=exc.argument,
            value=exc.value,
        ) from None
    ctx = selection.context
    cls = ctx.strategy_class
    if ctx.world_size > 1 and cls is not None and not issubclass(cls, ParallelStrategy):
        raise InvalidConfigError(
            f"`--strategy {args.strategy} --devices {args.devices} --num-nodes {args.num_nodes}`: "
            f"strategy {ctx.strategy!r} runs one process, but these options ask for {ctx.world_size}. Use "
            "`--devices 1 --num-nodes 1`, or a strategy for several processes (e.g. 'ddp'; "
            "`fabric-core list-plugins --kind strategy --all` lists them).",
            argument="strategy",
            value=args.strategy,
        )
    return ctx.num_processes


def _port(value: str, source: str) -> int:
    if not value.strip().isdigit() or not 1 <= int(value) <= 65535:
        raise InvalidConfigError(
            f"{source}={value!r}: a port must be a number from 1 to 65535 (leave it out to get a free one).",
            argument="main_port",
            value=value,
        )
    return int(value)


def elastic_options(max_restarts: str, monitor_interval: str) -> tuple[int, list[str]]:
    """torchrun's restart options from ``--max-restarts`` and ``--monitor-interval``, checked.

    Args:
        max_restarts: How many times every worker may be restarted after one fails (a whole number >= 0).
        monitor_interval: Seconds between the agent's looks at the workers (a number > 0).

    Returns:
        The number of restarts, and the options for torchrun.

    Raises:
        InvalidConfigError: A value that is not of that form.
    """
    text = str(max_restarts).strip()
    if not text.isdigit():
        raise InvalidConfigError(
            f"`--max-restarts {max_restarts}`: the number of restarts must be a whole number >= 0 (0: a failed "
            "worker fails the job; N: every worker is restarted up to N times).",
            argument="max_restarts",
            value=max_restarts,
        )
    try:
        interval = float(monitor_interval)
    except ValueError:
        interval = float("nan")
    if not 0 < interval < float("inf"):
        raise InvalidConfigError(
            f"`--monitor-interval {monitor_interval}`: must be a number of seconds > 0 (default {MONITOR_INTERVAL:g}).",
            argument="monitor_interval",
            value=monitor_interval,
        )
    return int(text), [f"--max-restarts={int(text)}", f"--monitor-interval={interval}"]


def _endpoint(endpoint: str, num_nodes: int) -> str:
    host, sep, port = endpoint.rpartition(":")
    several = num_nodes > 1
    if not sep or not host or not port.isdigit() or not (1 if several else 0) <= int(port) <= 65535:
        valid = "a port from 1 to 65535" if several else "a port from 0 (a free one) to 65535"
        raise InvalidConfigError(
            f"`--rdzv-endpoint {endpoint}`: expected HOST:PORT with {valid}.",
            argument="rdzv_endpoint",
            value=endpoint,
        )
    return endpoint


def rendezvous_options(
    num_nodes: int,
    address: str | None,
    port: str | None,
    environ: Mapping[str, str],
    *,
    backend: str | None = None,
    endpoint: str | None = None,
    rdzv_id: str | None = None,
    timeout: float | None = None,
) -> list[str]:
    """torchrun's rendezvous options: where node 0 listens.

    The port is ``--main-port``, else ``MASTER_PORT``, else (several nodes) :data:`MULTI_NODE_PORT`, which
    every node can agree on without talking. On one node with no port given, the agent's store listens on
    port 0: the kernel picks a free port at the moment it binds, so two jobs on one machine cannot collide
    (choosing a free port first and binding it later would leave a window for another job to take it).
    The workers get that port as ``MASTER_PORT`` and use the agent's store (that is torch's c10d
    rendezvous, whose costs for a one-node job :mod:`fabric_core._run.agent` takes off).

    Any of ``--rdzv-backend/--rdzv-endpoint/--rdzv-id`` chooses the rendezvous directly instead (backend
    c10d unless given; on one node the endpoint defaults to ``ADDRESS:0`` and the id to a new random one).

    Args:
        num_nodes: Number of nodes.
        address: ``--main-address`` (``None``: ``MASTER_ADDR``, else ``127.0.0.1``).
        port: ``--main-port`` (``None``: see above).
        environ: The environment to read ``MASTER_ADDR``/``MASTER_PORT`` from.
        backend: ``--rdzv-backend``.
        endpoint: ``--rdzv-endpoint`` (``HOST:PORT``).
        rdzv_id: ``--rdzv-id``.
        timeout: With several nodes, the seconds the nodes' agents wait for each other before the job fails
            (torch's own default is 600 for the static rendezvous and for c10d's join).

    Raises:
        InvalidConfigError: A port that is not in 1..65535, an unknown backend, a malformed endpoint,
            ``--main-port`` together with ``--rdzv-*``, or several nodes without an endpoint.
    """
    address = address or environ.get("MASTER_ADDR") or _DEFAULT_ADDRESS
    if backend is not None or endpoint is not None or rdzv_id is not None:
        options = _chosen_rendezvous(num_nodes, address, port, backend, endpoint, rdzv_id)
        if num_nodes > 1 and timeout is not None and (backend or "c10d").strip().lower() == "c10d":
            options.append(f"--rdzv-conf=join_timeout={_whole_seconds(timeout)}")
        return options
    if port is not None:
        chosen: int | None = _port(port, "--main-port")
    elif "MASTER_PORT" in environ:
        chosen = _port(environ["MASTER_PORT"], "MASTER_PORT")
    else:
        chosen = MULTI_NODE_PORT if num_nodes > 1 else None
    if chosen is not None:
        options = [f"--master_addr={address}", f"--master_port={chosen}"]
        if num_nodes > 1 and timeout is not None:  # the static rendezvous: node 0's store waits for the others
            options.append(f"--rdzv-conf=timeout={_whole_seconds(timeout)}")
        return options
    return [
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={address}:0",
        f"--rdzv-id={uuid.uuid4()}",
        f"--local-addr={address}",
    ]


def _whole_seconds(seconds: float) -> int:
    return max(1, round(seconds))


def rdzv_conf(options: list[str], key: str, value: str) -> list[str]:
    """``options`` with ``key=value`` in its one ``--rdzv-conf`` (torchrun keeps only the last one given)."""
    for index, option in enumerate(options):
        if option.startswith("--rdzv-conf="):
            return [*options[:index], f"{option},{key}={value}", *options[index + 1 :]]
    return [*options, f"--rdzv-conf={key}={value}"]


def _chosen_rendezvous(
    num_nodes: int, address: str, port: str | None, backend: str | None, endpoint: str | None, rdzv_id: str | None
) -> list[str]:
    if port is not None:
        raise InvalidConfigError(
            f"`--main-port {port}` with `--rdzv-*`: give the rendezvous either as --main-address/--main-port or "
            "as --rdzv-endpoint HOST:PORT, not both.",
            argument="main_port",
            value=port,
        )
    backend = (backend or "c10d").strip().lower()
    if backend not in RDZV_BACKENDS:
        raise InvalidConfigError(
            f"`--rdzv-backend {backend}`: unknown backend; choose one of {', '.join(RDZV_BACKENDS)}.",
            argument="rdzv_backend",
            value=backend,
        )
    if endpoint is None and num_nodes > 1:
        raise InvalidConfigError(
            f"`--num-nodes {num_nodes}` with `--rdzv-backend {backend}`: every node must be given the same "
            "--rdzv-endpoint HOST:PORT (node 0's address and a port it can listen on).",
            argument="rdzv_endpoint",
            value=endpoint,
        )
    options = [
        f"--rdzv-backend={backend}",
        f"--rdzv-endpoint={_endpoint(endpoint or f'{address}:0', num_nodes)}",
        # One node: a fresh id, so a job never joins the leftovers of another; several: the id all share.
        f"--rdzv-id={rdzv_id or (uuid.uuid4() if num_nodes == 1 else 'none')}",
    ]
    if num_nodes == 1:
        options.append(f"--local-addr={address}")
    return options
