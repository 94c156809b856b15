"""The ``fabric-core`` command line: ``list-plugins``, ``explain`` and ``run``.

``list-plugins`` without ``--check`` reads only the catalog: it imports neither torch nor any component.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fabric_core._deferred import lightning_reexports, reexports
from fabric_core._manager import PluginManager, get_manager
from fabric_core._registry import KINDS, Entry
from fabric_core.errors import FabricCoreError
from fabric_core.utilities._requirements import RequirementCache

if TYPE_CHECKING:
    from fabric_core.strategies.registry import STRATEGY_REGISTRY

__all__ = ["STRATEGY_REGISTRY", "main"]


# Lightning's CLI module imports the strategy registry; the same read view of the catalog, on first access.
__getattr__ = reexports(
    __name__, {"STRATEGY_REGISTRY": "fabric_core.strategies.registry"}, fallback=lightning_reexports(__name__)
)


def _entry_row(entry: Entry, check: bool) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": entry.kind,
        "name": entry.name,
        "aliases": list(entry.aliases),
        "plugin": entry.plugin,
        "description": entry.description,
        "target": entry.target,
        "defaults": dict(entry.defaults),
        "priority": entry.priority,
        "requires": list(entry.requires),
    }
    if check:
        missing = entry.missing_requirements()
        row["missing_requirements"] = missing
        row["available"] = not missing and entry.is_available()
    return row


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _list_plugins(args: argparse.Namespace, manager: PluginManager) -> int:
    catalog = manager.catalog
    records = sorted(
        (r for r in manager.records if args.all or r.name != "builtin"), key=lambda r: (r.name != "builtin", r.name)
    )
    entries = [e for e in catalog.entries(args.kind) if (args.all or e.plugin != "builtin")]
    entries.sort(key=lambda e: (KINDS.index(e.kind), e.plugin != "builtin", e.name))
    rows = [_entry_row(e, args.check) for e in entries]
    if args.json:
        payload = {"plugins": [r.as_dict() for r in records], "components": rows}
        print(json.dumps(payload, indent=2, default=repr))
        return 0
    print(
        _table(
            [[r.name, r.status, r.distribution or "-", r.version or "-", r.reason or ""] for r in records],
            ["PLUGIN", "STATUS", "DISTRIBUTION", "VERSION", "NOTE"],
        )
        if records
        else "No plugins installed. `fabric-core list-plugins --all` shows the built-ins too."
    )
    if rows:
        header = ["KIND", "NAME", "PLUGIN", "DESCRIPTION"]
        table_rows = []
        for row in rows:
            name = row["name"] + (f" ({', '.join(row['aliases'])})" if row["aliases"] else "")
            cells = [row["kind"], name, row["plugin"], row["description"]]
            if args.check:
                status = "yes" if row["available"] else "no"
                if row["missing_requirements"]:
                    status = "missing " + ", ".join(row["missing_requirements"])
                cells.insert(3, status)
            table_rows.append(cells)
        if args.check:
            header.insert(3, "AVAILABLE")
        print()
        print(_table(table_rows, header))
    return 0


def _explain(args: argparse.Namespace, manager: PluginManager) -> int:
    from fabric_core._selection import select

    with _plugin_output_to_stderr():  # selection hooks run plugin code too
        selection = select(
            manager,
            accelerator=args.accelerator,
            strategy=args.strategy,
            devices=args.devices,
            num_nodes=args.num_nodes,
            precision=args.precision,
            plugins=args.plugins,
        )
    rows = [[d.step, d.value, d.reason, d.plugin or "-", d.hook or "-", d.target or "-"] for d in selection.decisions]
    print(_table(rows, ["STEP", "CHOICE", "WHY", "PLUGIN", "HOOK", "BUILDS"]))
    ctx = selection.context
    print(
        f"\nworld size {ctx.world_size} = {ctx.num_processes} process(es) x {ctx.num_nodes} node(s); "
        f"processes created externally: {'yes' if ctx.creates_processes_externally else 'no'}"
    )
    from fabric_core._lightning_alias import describe

    print(describe())
    return 0


def build_parser(runners: Sequence[tuple[str, Any]] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fabric-core", description="Scale a PyTorch training loop.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    lp = sub.add_parser("list-plugins", help="List installed plugins and the components they provide.")
    lp.add_argument("--json", action="store_true", help="Print JSON instead of tables.")
    lp.add_argument("--kind", choices=KINDS, help="Only components of this kind.")
    lp.add_argument("--all", action="store_true", help="Include the built-in components.")
    lp.add_argument("--check", action="store_true", help="Run probes: availability and missing requirements.")

    ex = sub.add_parser("explain", help="Show how Fabric(...) arguments resolve on this machine.")
    ex.add_argument("--accelerator", default="auto")
    ex.add_argument("--strategy", default="auto")
    ex.add_argument("--devices", default="auto")
    ex.add_argument("--num-nodes", "--num_nodes", dest="num_nodes", default=1, type=int)
    ex.add_argument("--precision", default=None)
    ex.add_argument(
        "--plugins",
        action="append",
        default=None,
        metavar="NAME",
        help="A precision or cluster environment name, as an item of Fabric(plugins=[...]); repeatable.",
    )

    co = sub.add_parser(
        "consolidate",
        help="Turn a sharded checkpoint folder into one file that torch.load reads.",
        description="Read a sharded (torch.distributed.checkpoint) folder whole and write "
        "{'model': ..., 'optimizer': ..., extras} to one file. Never overwrites.",
    )
    co.add_argument("checkpoint_folder", help="The folder fabric.save wrote with a sharded strategy.")
    co.add_argument(
        "--output",
        "--output_file",
        dest="output",
        default=None,
        help="The file to write (default: <folder>.consolidated).",
    )
    co.add_argument(
        "--no-weights-only",
        dest="weights_only",
        action="store_false",
        help="Unpickle anything in the folder (weights_only=False). Only for a folder you trust: a crafted one "
        "can run code. By default the folder may hold only DCP metadata, tensors and plain containers.",
    )

    from fabric_core._run import add_run_parser

    add_run_parser(sub, runners)
    return parser


def _consolidate(args: argparse.Namespace) -> int:
    from fabric_core.io.distributed import consolidate

    try:
        written = consolidate(args.checkpoint_folder, args.output, weights_only=None if args.weights_only else False)
    except FileNotFoundError as exc:
        print(f"fabric-core consolidate: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {written}")
    return 0


@contextlib.contextmanager
def _plugin_output_to_stderr() -> Iterator[None]:
    """Send what plugins print while they load to stderr, so that stdout holds only this command's output.

    Done by the command line, which owns the process, and not by the library: redirecting stdout there
    would also catch the user's other threads. File descriptor 1 is redirected as well as ``sys.stdout``,
    so output from extension modules and child processes goes the same way.
    """
    sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
    except OSError:  # no file descriptor 1 (closed): redirect Python's writes only
        saved = None
    try:
        if saved is not None:
            os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _runners_if_run(argv: Sequence[str]) -> list[tuple[str, Any]]:
    """For ``fabric-core run``, the runners whose own options the parser must know (loads only them)."""
    if next((a for a in argv if not a.startswith("-")), None) != "run":
        return []
    from fabric_core._run import runners_with_options

    try:
        return runners_with_options(get_manager())
    except FabricCoreError:  # a bad switch: reported once the command runs
        return []


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fabric-core`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_runners_if_run(argv))
    args = parser.parse_args(argv)
    try:
        manager = get_manager()  # reads the switches: a bad value is one line, not a traceback
        if args.command == "list-plugins":
            with _plugin_output_to_stderr():
                manager.catalog  # noqa: B018 - discovery, imports and registration hooks
            return _list_plugins(args, manager)
        if args.command == "explain":
            return _explain(args, manager)
        if args.command == "consolidate":
            return _consolidate(args)
        from fabric_core._run import run_command

        return run_command(args, manager)
    except FabricCoreError as exc:
        print(f"fabric-core {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `fabric-core list-plugins | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# -- Lightning's private names of its ``cli`` module, over ``fabric-core run`` ---------------------------------

_CLICK_AVAILABLE = RequirementCache("click")
_LIGHTNING_SDK_AVAILABLE = RequirementCache("lightning_sdk")
_SUPPORTED_ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "tpu", "auto")


def _get_supported_strategies() -> list[str]:
    """The registered strategy names a command line can launch (no spawn, fork, notebook, XLA or offload ones)."""
    import re

    from fabric_core.strategies.registry import STRATEGY_REGISTRY

    excluded = r".*(spawn|fork|notebook|xla|tpu|offload).*"
    return [name for name in STRATEGY_REGISTRY.available_strategies() if not re.match(excluded, name)]


def _set_env_variables(args: argparse.Namespace) -> None:
    """Set the variables ``fabric-core run`` sets for the processes it starts (``Fabric()`` reads them there).

    Args:
        args: ``accelerator``, ``strategy``, ``devices``, ``num_nodes`` and ``precision`` (``None``: not set).
    """
    from fabric_core._arguments import ENV_OVERRIDES
    from fabric_core._run import set_run_environment

    # Lightning always sets the devices and the number of nodes; the other options only when given.
    values = {arg: getattr(args, arg) for arg in ENV_OVERRIDES}
    set_run_environment(
        {
            arg: None if value is None and arg not in ("devices", "num_nodes") else str(value)
            for arg, value in values.items()
        }
    )


def _get_num_processes(accelerator: str | None, devices: str) -> int:
    """How many processes ``devices`` asks for on this machine, resolved as ``Fabric(...)`` resolves it.

    Raises:
        ValueError: ``accelerator="tpu"`` (not launched from the command line), or a value ``Fabric`` refuses.
    """
    if accelerator == "tpu":
        raise ValueError("Launching processes for TPU through the CLI is not supported.")
    from fabric_core._run_checks import num_processes

    options = argparse.Namespace(accelerator=accelerator, strategy=None, devices=devices, num_nodes=1, precision=None)
    return num_processes(get_manager(), options)


def _torchrun_launch(args: argparse.Namespace, script_args: list[str]) -> None:
    """Start ``args.script`` in new processes through torchrun, as ``fabric-core run`` does.

    Args:
        args: Lightning's ``run`` options (``script``, ``accelerator``, ``strategy``, ``devices``, ``num_nodes``,
            ``node_rank``, ``main_address``, ``main_port``, ``precision``).
        script_args: The script's own arguments.

    Raises:
        SystemExit: The run failed, with its exit code.
    """
    argv = ["run"]
    for option in ("accelerator", "strategy", "devices", "num_nodes", "node_rank", "main_address", "main_port"):
        value = getattr(args, option, None)
        if value is not None:
            argv += [f"--{option.replace('_', '-')}", str(value)]
    if getattr(args, "precision", None) is not None:
        argv += ["--precision", str(args.precision)]
    code = main([*argv, str(args.script), *script_args])
    if code:
        raise SystemExit(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
