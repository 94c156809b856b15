"""``fabric-core run SCRIPT [SCRIPT ARGS]``: start a script on N processes (and nodes) with torchrun.

The options become ``FABRIC_CORE_*`` environment variables that ``Fabric(...)`` reads in every process, so a
script that builds ``Fabric()`` with no arguments runs with whatever the command line chose. Names come
from the catalog, so an installed plugin's names work without a change here.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fabric_core._arguments import ENV_OVERRIDES
from fabric_core._manager import PluginManager
from fabric_core._registry import Spec
from fabric_core.errors import InvalidConfigError, UnknownNameError

__all__ = ["add_run_parser", "run_command"]


def add_run_parser(sub: Any) -> None:
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
    run.add_argument("--main-address", "--main_address", dest="main_address", default="127.0.0.1")
    run.add_argument("--main-port", "--main_port", dest="main_port", type=int, default=29400)
    run.add_argument("--precision", default=None, help="Precision, e.g. 32-true, bf16-mixed.")


def _num_processes(manager: PluginManager, accelerator: str | None, devices: str) -> int:
    """How many processes per node ``--devices`` means on the accelerator."""
    from fabric_core._selection import SelectionContext

    requested = (accelerator or "auto").lower()
    ctx = SelectionContext(catalog=manager.catalog)
    answer, _ = manager.select_accelerator(requested, ctx)
    name = answer.name if isinstance(answer, Spec) else answer
    cls = manager.catalog.get("accelerator", name, argument="fabric-core run --accelerator ...").load()
    value: Any = devices.strip()
    if value.lower() in ("auto", "-1"):
        return int(cls.auto_device_count())
    if value.isdigit():
        value = int(value)
    return len(cls.get_parallel_devices(cls.parse_devices(value)))


def run_command(args: argparse.Namespace, manager: PluginManager) -> int:
    """Validate the names, set the environment, and hand over to torchrun."""
    catalog = manager.catalog
    for kind, value in (("accelerator", args.accelerator), ("strategy", args.strategy)):
        if value is not None and value.lower() not in ("auto", "gpu"):
            catalog.get(kind, value, argument=f"fabric-core run --{kind} ...")
    if args.precision is not None:
        from fabric_core._arguments import PRECISION_ALIASES

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
    if args.num_nodes < 1 or not 0 <= args.node_rank < args.num_nodes:
        raise InvalidConfigError(
            f"`--num-nodes {args.num_nodes} --node-rank {args.node_rank}`: need num_nodes >= 1 and "
            "0 <= node_rank < num_nodes.",
            argument="node_rank",
            value=args.node_rank,
        )
    nprocs = _num_processes(manager, args.accelerator, args.devices)
    values = {
        "accelerator": args.accelerator,
        "strategy": args.strategy,
        "devices": args.devices,
        "num_nodes": str(args.num_nodes),
        "precision": args.precision,
    }
    os.environ["FABRIC_CORE_CLI_USED"] = "1"
    for arg, var in ENV_OVERRIDES.items():
        if values[arg] is not None:
            os.environ[var] = values[arg]
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(nprocs, 1))))
    torchrun_args = [
        f"--nproc_per_node={nprocs}",
        f"--nnodes={args.num_nodes}",
        f"--node_rank={args.node_rank}",
        f"--master_addr={args.main_address}",
        f"--master_port={args.main_port}",
        args.script,
        *args.script_args,
    ]
    from torch.distributed.run import main as torchrun

    try:
        torchrun(torchrun_args)
    except SystemExit as exc:  # torchrun exits through sys.exit on success and failure alike
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except Exception as exc:  # a failed child surfaces as ChildFailedError with its traceback printed
        print(f"fabric-core run: {exc}", file=sys.stderr)
        return 1
    return 0
