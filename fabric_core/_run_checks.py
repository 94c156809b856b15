"""What ``fabric-core run`` decides before it starts any process: the process count and the rendezvous.

Both refuse a contradiction with :class:`InvalidConfigError` (the CLI prints it and exits with status 2), so
a job that cannot run never starts a worker.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Mapping
from typing import Final

from fabric_core._manager import PluginManager
from fabric_core.errors import InvalidConfigError

__all__ = ["MULTI_NODE_PORT", "num_processes", "rendezvous_options"]

#: The port of node 0 when several nodes must agree on one and none was given.
MULTI_NODE_PORT: Final = 29400
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
    from fabric_core._selection import select
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


def rendezvous_options(num_nodes: int, address: str | None, port: str | None, environ: Mapping[str, str]) -> list[str]:
    """torchrun's rendezvous options: where node 0 listens.

    The port is ``--main-port``, else ``MASTER_PORT``, else (several nodes) :data:`MULTI_NODE_PORT`, which
    every node can agree on without talking. On one node with no port given, the agent's store listens on
    port 0: the kernel picks a free port at the moment it binds, so two jobs on one machine cannot collide
    (choosing a free port first and binding it later would leave a window for another job to take it).
    The workers get that port as ``MASTER_PORT`` and use the agent's store.

    Args:
        num_nodes: Number of nodes.
        address: ``--main-address`` (``None``: ``MASTER_ADDR``, else ``127.0.0.1``).
        port: ``--main-port`` (``None``: see above).
        environ: The environment to read ``MASTER_ADDR``/``MASTER_PORT`` from.

    Raises:
        InvalidConfigError: A port that is not in 1..65535.
    """
    address = address or environ.get("MASTER_ADDR") or _DEFAULT_ADDRESS
    if port is not None:
        chosen: int | None = _port(port, "--main-port")
    elif "MASTER_PORT" in environ:
        chosen = _port(environ["MASTER_PORT"], "MASTER_PORT")
    else:
        chosen = MULTI_NODE_PORT if num_nodes > 1 else None
    if chosen is not None:
        return [f"--master_addr={address}", f"--master_port={chosen}"]
    return [
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={address}:0",
        f"--rdzv-id={uuid.uuid4()}",
        f"--local-addr={address}",
    ]
