"""``fabric-core run SCRIPT [SCRIPT ARGS]``: start a script on N processes (and nodes) with torchrun.

``--launcher NAME`` starts it with another registered runner instead (``fabric_core_register_runners``);
a runner's own options are added to the parser when the command is ``run``.

The options become ``FABRIC_CORE_*`` environment variables that ``Fabric(...)`` reads in every process, so a
script that builds ``Fabric()`` with no arguments runs with whatever the command line chose. Names come
from the catalog, so an installed plugin's names work without a change here.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

from fabric_core._kernel.arguments import ENV_OVERRIDES, LIGHTNING_CLI_ENV, LIGHTNING_ENV_OVERRIDES
from fabric_core._kernel.manager import PluginManager
from fabric_core._run.checks import (
    MONITOR_INTERVAL,
    MULTI_NODE_PORT,
    RDZV_BACKENDS,
    elastic_options,
    rendezvous_options,
)
from fabric_core._run.checks import num_processes as _num_processes
from fabric_core._run.worker import CLI_ENV, LAUNCHER_PID_ENV
from fabric_core.errors import FabricCoreError, InvalidConfigError, UnknownNameError

__all__ = [
    "add_run_parser",
    "elastic_network_options",
    "nodes_did_not_meet",
    "run_command",
    "run_torchrun",
    "runners_with_options",
    "set_run_environment",
]


def add_run_parser(sub: Any, runners: Sequence[tuple[str, Any]] = ()) -> None:
    run = sub.add_parser(
        "run",
        help="Run a script on one or more processes/nodes (torchrun underneath).",
        description="Run SCRIPT with Fabric settings from the command line; its own arguments follow it.",
    )
    run.add_argument("script", help="Path to the training script.")
    run.add_argument("script_args", nargs=argparse.REMAINDER, help="Arguments passed on to the script.")
    run.add_argument("--accelerator", default=None, help="Accelerator name (`fabric-core list-plugins --all`).")
    run.add_argument("--strategy", default=None, help="Strategy name.")
    run.add_argument("--devices", default="1", help="Devices per node: a count, 'auto', or ids like '0,1'.")
    run.add_argument("--num-nodes", "--num_nodes", dest="num_nodes", type=int, default=1)
    run.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0)
    run.add_argument(
        "--main-address",
        "--main_address",
        dest="main_address",
        default=None,
        help="Address of node 0 (default: MASTER_ADDR, else 127.0.0.1).",
    )
    run.add_argument(
        "--main-port",
        "--main_port",
        dest="main_port",
        default=None,
        help=f"Port on node 0 (default: MASTER_PORT, else {MULTI_NODE_PORT} with several nodes, else a free port).",
    )
    run.add_argument("--precision", default=None, help="Precision, e.g. 32-true, bf16-mixed.")
    run.add_argument(
        "--lightning-imports",
        "--lightning_imports",
        dest="lightning_imports",
        action="store_true",
        help="Zero-edit mode: the script's `lightning.fabric` / `lightning_fabric` imports are fabric_core's modules.",
    )
    before = len(run._actions)
    elastic = run.add_argument_group(
        "restarts and rendezvous (--launcher torchrun: torch's elastic agent)",
        "When a worker dies, every worker is stopped and started again with the same arguments, up to "
        "--max-restarts times; TORCHELASTIC_RESTART_COUNT tells the script which attempt it is.",
    )
    elastic.add_argument(
        "--max-restarts",
        "--max_restarts",
        dest="max_restarts",
        default="0",
        help="How many times to restart every worker after one fails (default 0: the job fails).",
    )
    elastic.add_argument(
        "--monitor-interval",
        "--monitor_interval",
        dest="monitor_interval",
        default=str(MONITOR_INTERVAL),
        help=f"Seconds between the agent's looks at the workers (default {MONITOR_INTERVAL:g}).",
    )
    elastic.add_argument(
        "--rdzv-backend",
        "--rdzv_backend",
        dest="rdzv_backend",
        default=None,
        help=f"Rendezvous backend: {', '.join(RDZV_BACKENDS)} (default: c10d when any --rdzv-* is given).",
    )
    elastic.add_argument(
        "--rdzv-endpoint",
        "--rdzv_endpoint",
        dest="rdzv_endpoint",
        default=None,
        help="HOST:PORT of the rendezvous (default on one node: --main-address with port 0, a free port).",
    )
    elastic.add_argument(
        "--rdzv-id",
        "--rdzv_id",
        dest="rdzv_id",
        default=None,
        help="The job's rendezvous id, the same on every node (default on one node: a new random id).",
    )
    torchrun_options = {action.dest: action.default for action in run._actions[before:]}
    _add_launcher_options(run, runners, torchrun_options)


def run_command(args: argparse.Namespace, manager: PluginManager) -> int:
    """Validate the names and the script, then start it with the runner ``--launcher`` names."""
    catalog = manager.catalog
    for kind, value in (("accelerator", args.accelerator), ("strategy", args.strategy)):
        if value is not None and value.lower() not in ("auto", "gpu"):
            catalog.get(kind, value, argument=f"fabric-core run --{kind} ...")
    if args.precision is not None:
        from fabric_core._kernel.arguments import PRECISION_ALIASES

        name = args.precision.lower()
        if name not in PRECISION_ALIASES and catalog.find("precision", name) is None:
            raise UnknownNameError(
                "precision",
                name,
                catalog.names("precision") + list(PRECISION_ALIASES),
                argument="fabric-core run --precision ...",
            )
    if not os.path.isfile(args.script):
        raise InvalidConfigError(
            f"`fabric-core run {args.script}`: no such file.", argument="script", value=args.script
        )
    runner = manager.catalog.get("runner", args.launcher, argument="fabric-core run --launcher ...")
    _refuse_foreign_options(args, runner.name)
    if getattr(args, "lightning_imports", False):
        if runner.name != "torchrun":
            raise InvalidConfigError(
                f"`fabric-core run --lightning-imports` works with `--launcher torchrun` only, whose workers inherit "
                f"this process's environment; {runner.name!r} starts them elsewhere. Call "
                "fabric_core.compat.provide_lightning_fabric() at the top of the script instead.",
                argument="lightning_imports",
                value=runner.name,
            )
        from fabric_core._lightning.alias import install

        install()  # FABRIC_CORE_LIGHTNING_IMPORTS=1 and the handover folder on PYTHONPATH, for every worker
    return int(runner.load()(args, manager))


def run_torchrun(args: argparse.Namespace, manager: PluginManager) -> int:
    """The built-in runner ``"torchrun"``: set the environment and hand over to torchrun."""
    from fabric_core._run.agent import collection_deferred

    with collection_deferred():  # until the workers have started: see fabric_core._run.agent
        return _run_torchrun(args, manager)


def _run_torchrun(args: argparse.Namespace, manager: PluginManager) -> int:
    if not 0 <= args.node_rank < max(args.num_nodes, 1):
        raise InvalidConfigError(
            f"`--node-rank {args.node_rank}` with `--num-nodes {args.num_nodes}`: need 0 <= node_rank < num_nodes.",
            argument="node_rank",
            value=args.node_rank,
        )
    restarts, elastic = elastic_options(args.max_restarts, args.monitor_interval)
    nprocs = _num_processes(manager, args)
    from fabric_core._distributed.rendezvous import rendezvous_timeout

    meeting = rendezvous_timeout().total_seconds()
    rendezvous = rendezvous_options(
        args.num_nodes,
        args.main_address,
        args.main_port,
        os.environ,
        backend=args.rdzv_backend,
        endpoint=args.rdzv_endpoint,
        rdzv_id=args.rdzv_id,
        timeout=meeting,
    )
    rendezvous = elastic_network_options(rendezvous, args.num_nodes)
    if args.num_nodes > 1 and "rdzv-endpoint" in _option_values(rendezvous):
        # torch's c10d rendezvous lends its store to the workers and writes the workers' MASTER_ADDR into it
        # only in the first round a node is rank 0 in. A node that joins a later round (a machine started
        # again after it died) then waits for that key until the store times out, and so does everyone else.
        # With a store of each round's own, rank 0 writes the key every round.
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    values = {
        "accelerator": args.accelerator,
        "strategy": args.strategy,
        "devices": args.devices,
        "num_nodes": str(args.num_nodes),
        "precision": args.precision,
    }
    set_run_environment(values)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(nprocs, 1))))
    torchrun_args = [
        f"--nproc_per_node={nprocs}",
        f"--nnodes={args.num_nodes}",
        f"--node_rank={args.node_rank}",
        *rendezvous,
        *elastic,
        # Every worker starts in fabric_core._run.worker, which ties it to this process, then runs the script.
        "--module",
        "fabric_core._run.worker",
        args.script,
        *args.script_args,
    ]
    where = _meeting_point(rendezvous)
    return _torchrun(torchrun_args, restarts, meeting=(args.node_rank, args.num_nodes, where, meeting))


def set_run_environment(values: dict[str, str | None], *, lightning: bool = False) -> None:
    """Set what ``Fabric()`` reads in the processes this one starts: that a command line started them, and each
    given option (``accelerator``, ``strategy``, ``devices``, ``num_nodes``, ``precision``; ``None``: left unset).

    Args:
        values: The options, by argument name.
        lightning: Set Lightning's variables, as its ``fabric run`` does (``LT_CLI_USED=1``, ``LT_*``), instead
            of ``fabric-core run``'s (``FABRIC_CORE_CLI_USED=1``, this launcher's PID, ``FABRIC_CORE_*``).
    """
    if lightning:
        os.environ[LIGHTNING_CLI_ENV] = "1"
    else:
        os.environ[CLI_ENV] = "1"
        os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    for arg, var in (LIGHTNING_ENV_OVERRIDES if lightning else ENV_OVERRIDES).items():
        value = values.get(arg)
        if value is not None:
            os.environ[var] = value


def _option_values(options: list[str]) -> dict[str, str]:
    """torchrun's ``--name=value`` options as ``{name: value}``."""
    return dict(option[2:].split("=", 1) for option in options if "=" in option)


def _meeting_point(options: list[str]) -> str:
    values = _option_values(options)
    if "rdzv-endpoint" in values:
        return values["rdzv-endpoint"]
    return f"{values.get('master_addr', '?')}:{values.get('master_port', '?')}"


def _torchrun(
    torchrun_args: list[str], max_restarts: int = 0, meeting: tuple[int, int, str, float] | None = None
) -> int:
    """Run torchrun in this process; its exit code, with one line on stderr for each way it can fail.

    ``meeting`` is ``(node_rank, num_nodes, where, seconds)``: how this node meets the others (``None``: one
    node, nothing to meet).
    """
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError as AgentRendezvousError
    from torch.distributed.run import main as torchrun

    from fabric_core._run.agent import describe_exit, launcher_agent

    try:
        with launcher_agent(num_nodes=1 if meeting is None else meeting[1]):
            torchrun(torchrun_args)
    except SystemExit as exc:  # torchrun exits through sys.exit on success and failure alike
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except SignalException as exc:  # torchrun turns SIGTERM/SIGINT/... into this, after stopping the workers
        print(
            f"fabric-core run: stopped by {signal.Signals(exc.sigval).name}; the workers were stopped.", file=sys.stderr
        )
        return 128 + int(exc.sigval)
    except KeyboardInterrupt:  # Ctrl-C before torchrun took over the signals
        return 128 + signal.SIGINT
    except ChildFailedError as exc:  # the failing worker's traceback is on stderr already
        rank, failure = exc.get_first_failure()
        code = failure.exitcode
        how = describe_exit(code)
        left = f"no restarts left (--max-restarts {max_restarts})"
        print(
            f"fabric-core run: rank {rank} (pid {failure.pid}) {how}; the other workers were stopped; {left}.",
            file=sys.stderr,
        )
        return shell_code(code)
    except (AgentRendezvousError, DistError, TimeoutError) as exc:  # the nodes' agents did not meet
        if meeting is None or meeting[1] < 2:
            raise
        print(nodes_did_not_meet(*meeting, exc), file=sys.stderr)
        return 1
    return 0


def nodes_did_not_meet(node_rank: int, num_nodes: int, where: str, seconds: float, error: BaseException) -> str:
    """The launcher's line when its node could not meet the others: which node, where, how long, and why."""
    from fabric_core._distributed.rendezvous import RENDEZVOUS_TIMEOUT_VARIABLE

    cause = " ".join(str(error).split()) or type(error).__name__
    while error.__cause__ is not None:  # torch wraps the store's error; its own words are the cause
        error = error.__cause__
        cause = f"{cause} <- {' '.join(str(error).split())}"
    others = ", ".join(str(n) for n in range(num_nodes) if n != node_rank)
    return (
        f"fabric-core run: node {node_rank} of {num_nodes} could not meet node(s) {others} at {where} within "
        f"{seconds:g} s ({RENDEZVOUS_TIMEOUT_VARIABLE}); no worker was started. Start every node with the same "
        "--num-nodes, --main-address/--main-port (or --rdzv-endpoint) and a --node-rank of its own, check that "
        f"each can reach {where}, or raise {RENDEZVOUS_TIMEOUT_VARIABLE} if nodes start minutes apart. "
        f"({type(error).__name__}: {cause[:600]})"
    )


def elastic_network_options(options: list[str], num_nodes: int) -> list[str]:
    """torchrun's options, plus what torch's elastic rendezvous gets wrong where the host name is loopback.

    On several nodes with ``--rdzv-endpoint``, torch decides whether this node hosts the rendezvous store by
    comparing the endpoint with the addresses of the host name, and tells the other nodes this node's host
    name as its address. Where the host name resolves to loopback only, neither works: this node then passes
    ``--local-addr`` (its address on the route to the endpoint) and, where the endpoint is one of its own
    addresses, ``is_host=1``.

    Raises:
        InvalidConfigError: No route from this machine to the endpoint.
    """
    from fabric_core._distributed import network
    from fabric_core._run.checks import rdzv_conf

    values = _option_values(options)
    endpoint = values.get("rdzv-endpoint")
    if num_nodes < 2 or endpoint is None or "local-addr" in values:
        return options
    host = endpoint.rpartition(":")[0].strip("[]")
    addresses = network.resolved(host)
    if not addresses or all(network.is_loopback(a) for a in addresses) or not network.hostname_is_loopback():
        return options
    try:
        local = network.route_source(addresses[0])
    except OSError as error:
        raise InvalidConfigError(
            f"`--rdzv-endpoint {endpoint}`: this machine has no route to {addresses[0]} ({error.strerror or error}). "
            "Give node 0's address as the other nodes reach it.",
            argument="rdzv_endpoint",
            value=endpoint,
        ) from None
    hosts = network.is_local_address(host)
    if hosts:
        options = rdzv_conf(options, "is_host", "1")
    print(
        f"fabric-core run: the host name {socket.gethostname()!r} resolves to a loopback address; this node "
        f"tells the others its address is {local} (--local-addr){', and hosts the rendezvous store' if hosts else ''}.",
        file=sys.stderr,
        flush=True,
    )
    return [*options, f"--local-addr={local}"]


def shell_code(code: int) -> int:
    """A process's exit status as a shell reports it: ``128 + N`` for a death by signal N (``-N``)."""
    return 128 - code if code < 0 else code


def runners_with_options(manager: PluginManager) -> list[tuple[str, Any]]:
    """The runners that declare options of their own (``add_arguments``), as ``(name, runner)``.

    A runner that fails to load is left out here: its options are then unknown, and choosing it with
    ``--launcher`` reports why it failed, while every other runner keeps working.
    """
    found: list[tuple[str, Any]] = []
    for entry in manager.catalog.selectable("runner"):
        try:
            runner = entry.load()
        except FabricCoreError:
            continue
        if callable(getattr(runner, "add_arguments", None)):
            found.append((entry.name, runner))
    return found


def _add_launcher_options(
    run: argparse.ArgumentParser, runners: Sequence[tuple[str, Any]], torchrun_options: dict[str, Any]
) -> None:
    names = ", ".join(["torchrun", *(name for name, _ in runners if name != "torchrun")])
    run.add_argument(
        "--launcher",
        default="torchrun",
        help=f"How to start the processes: a runner name ({names}, ...; `fabric-core list-plugins --kind runner`).",
    )
    owned: dict[str, dict[str, Any]] = {"torchrun": torchrun_options}  # the elastic agent's options
    for name, runner in runners:
        group = run.add_argument_group(f"--launcher {name}")
        before = len(run._actions)
        runner.add_arguments(group)
        owned[name] = {action.dest: action.default for action in run._actions[before:]}
    run.set_defaults(_runner_options=owned)


def _refuse_foreign_options(args: argparse.Namespace, launcher: str) -> None:
    """Refuse an option given for a runner other than the chosen one: it would be ignored silently."""
    for name, defaults in getattr(args, "_runner_options", {}).items():
        if name == launcher:
            continue
        for dest, default in defaults.items():
            if getattr(args, dest, default) != default:
                option = "--" + dest.replace("_", "-")
                raise InvalidConfigError(
                    f"`fabric-core run {option} ...` is an option of `--launcher {name}`, but the launcher is "
                    f"{launcher!r}. Add `--launcher {name}`, or leave {option} out.",
                    argument=dest,
                    value=getattr(args, dest),
                )
