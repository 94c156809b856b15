"""The command lines: ``fabric-core`` (list-plugins, explain, consolidate, run) and Lightning's ``fabric``.

``list-plugins`` without ``--check`` reads only the catalog: it imports neither torch nor any component.
At Lightning's path ``lightning.fabric.cli`` (zero-edit mode) this module is also Lightning's ``fabric``
console script: its click commands ``_main``, ``_run`` and ``_consolidate`` are built on first access, and
only where click is installed, as Lightning defines them only then.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, get_args, overload

from fabric_core._deferred import lightning_reexports, reexports
from fabric_core._kernel.manager import PluginManager, get_manager
from fabric_core._kernel.registry import KINDS, Entry
from fabric_core.errors import FabricCoreError
from fabric_core.utilities._requirements import RequirementCache

if TYPE_CHECKING:
    from fabric_core.strategies.registry import STRATEGY_REGISTRY

__all__ = ["STRATEGY_REGISTRY", "main"]


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
    from fabric_core._kernel.selection import select

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
    from fabric_core._lightning.alias import describe

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
        help="Turn a sharded checkpoint folder into one torch file, or the model's weights into safetensors.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Read a sharded (torch.distributed.checkpoint) folder and write it out. What is written follows OUT:

  OUT ending in .safetensors  the model's weights alone, as one safetensors file
  OUT ending in /             the model's weights alone, as a Hugging Face folder: model.safetensors, or
                              shards of at most --max-shard-size beside model.safetensors.index.json
                              (from_pretrained and fabric.load_raw read it)
  any other OUT, and none     the whole checkpoint, {'model': ..., 'optimizer': ..., extras}, as one
                              torch file (default: <folder>.consolidated)

The model's weights are the tensors of the checkpoint's module state dict: the only one, 'model' when
there are several, or the one --model-key names; optimizer state and extras are left out. They are read
a few hundred MB at a time, never held whole. Nothing is overwritten: a file OUT must not exist; a folder
OUT may, if it holds no weights (its other files, such as config.json, are kept).""",
        epilog="""\
examples:
  fabric-core consolidate ckpt --output model.safetensors
  fabric-core consolidate ckpt --output hf-model/ --max-shard-size 2GB
  fabric-core consolidate ckpt --output ckpt.pt""",
    )
    co.add_argument("checkpoint_folder", help="The folder fabric.save wrote with a sharded strategy.")
    co.add_argument(
        "--output",
        "--output_file",
        dest="output",
        default=None,
        metavar="OUT",
        help="Where to write: NAME.safetensors, FOLDER/ (Hugging Face), or a torch file (default: "
        "<folder>.consolidated, a torch file).",
    )
    co.add_argument(
        "--model-key",
        dest="model_key",
        default=None,
        metavar="KEY",
        help="For a safetensors OUT: the checkpoint entry whose weights to write (default: the only module state "
        "dict, or 'model' when there are several).",
    )
    co.add_argument(
        "--max-shard-size",
        dest="max_shard_size",
        default=None,
        metavar="SIZE",
        help="For a folder OUT: the largest file, e.g. 5GB, 500MB, 2GiB or a number of bytes (default: 5GB, as "
        "save_pretrained).",
    )
    co.add_argument(
        "--no-weights-only",
        dest="weights_only",
        action="store_false",
        help="Unpickle anything in the folder (weights_only=False). Only for a folder you trust: a crafted one "
        "can run code. By default the folder may hold only DCP metadata, tensors and plain containers.",
    )

    from fabric_core._run.command import add_run_parser

    add_run_parser(sub, runners)
    return parser


def _consolidate_folder(args: argparse.Namespace) -> int:
    from fabric_core.io.distributed import consolidate

    try:
        written = consolidate(
            args.checkpoint_folder,
            args.output,
            weights_only=None if args.weights_only else False,
            model_key=args.model_key,
            max_shard_size=args.max_shard_size,
        )
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
    from fabric_core._run.command import runners_with_options

    try:
        return runners_with_options(get_manager())
    except FabricCoreError:  # a bad switch: reported once the command runs
        return []


@overload
def main(args: Sequence[str] | None = None) -> int: ...


@overload
def main(args: argparse.Namespace, script_args: list[str] | None = None) -> None: ...


def main(args: Sequence[str] | argparse.Namespace | None = None, script_args: list[str] | None = None) -> int | None:
    """Entry point of the ``fabric-core`` console script; also Lightning's ``main(args, script_args)``.

    Args:
        args: The ``fabric-core`` command line (``sys.argv[1:]`` if ``None``); or, as Lightning calls it, the
            parsed options of its ``fabric run`` (a ``Namespace``): then Lightning's variables are set and
            ``args.script`` is started through torchrun, as Lightning's ``fabric run`` starts it.
        script_args: The script's own arguments (Lightning's call only).

    Returns:
        The exit code of the ``fabric-core`` command; ``None`` for Lightning's call.
    """
    if isinstance(args, argparse.Namespace):
        _set_env_variables(args)
        _torchrun_launch(args, script_args or [])
        return None
    argv = list(sys.argv[1:] if args is None else args)
    parser = build_parser(_runners_if_run(argv))
    parsed = parser.parse_args(argv)
    try:
        manager = get_manager()  # reads the switches: a bad value is one line, not a traceback
        if parsed.command == "list-plugins":
            with _plugin_output_to_stderr():
                manager.catalog  # noqa: B018 - discovery, imports and registration hooks
            return _list_plugins(parsed, manager)
        if parsed.command == "explain":
            return _explain(parsed, manager)
        if parsed.command == "consolidate":
            return _consolidate_folder(parsed)
        from fabric_core._run.command import run_command

        return run_command(parsed, manager)
    except FabricCoreError as exc:
        print(f"fabric-core {parsed.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `fabric-core list-plugins | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# -- Lightning's ``cli`` module: its ``fabric`` command (click) and the helpers behind it ----------------------

_log = logging.getLogger(__name__)
_CLICK_AVAILABLE = RequirementCache("click")
_LIGHTNING_SDK_AVAILABLE = RequirementCache("lightning_sdk")
_SUPPORTED_ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "tpu", "auto")
#: Lightning's click commands: ``_main`` is the ``fabric`` console script's group, ``_run`` and ``_consolidate``
#: its two commands. Built on first access (only with click installed), so that this module stays light.
_CLICK_COMMANDS: Final = ("_main", "_run", "_consolidate")


def _get_supported_strategies() -> list[str]:
    """The registered strategy names a command line can launch (no spawn, fork, notebook, XLA or offload ones)."""
    import re

    from fabric_core.strategies.registry import STRATEGY_REGISTRY

    excluded = r".*(spawn|fork|notebook|xla|tpu|offload).*"
    return [name for name in STRATEGY_REGISTRY.available_strategies() if not re.match(excluded, name)]


def _set_env_variables(args: argparse.Namespace) -> None:
    """Set the ``LT_*`` variables Lightning's ``fabric run`` sets; ``Fabric()`` reads them in the processes.

    Args:
        args: ``accelerator``, ``strategy``, ``devices``, ``num_nodes`` and ``precision`` (``None``: not set).
    """
    from fabric_core._kernel.arguments import ENV_OVERRIDES
    from fabric_core._run.command import set_run_environment

    # Lightning always sets the devices and the number of nodes; the other options only when given.
    values = {arg: getattr(args, arg) for arg in ENV_OVERRIDES}
    set_run_environment(
        {
            arg: None if value is None and arg not in ("devices", "num_nodes") else str(value)
            for arg, value in values.items()
        },
        lightning=True,
    )


def _get_num_processes(accelerator: str | None, devices: str) -> int:
    """How many processes ``devices`` asks for on this machine, resolved as ``Fabric(...)`` resolves it.

    Raises:
        ValueError: ``accelerator="tpu"`` (not launched from the command line), or a value ``Fabric`` refuses.
    """
    if accelerator == "tpu":
        raise ValueError("Launching processes for TPU through the CLI is not supported.")
    from fabric_core._run.checks import num_processes

    options = argparse.Namespace(accelerator=accelerator, strategy=None, devices=devices, num_nodes=1, precision=None)
    return num_processes(get_manager(), options)


def _torchrun_launch(args: argparse.Namespace, script_args: list[str]) -> None:
    """Start ``args.script`` in new processes with torchrun, handing it exactly the arguments Lightning hands it.

    The workers run the script itself (not ``fabric-core run``'s worker wrapper) and meet at
    ``--main-address``/``--main-port`` (default 29400), as Lightning's ``fabric run`` starts them, so a job file
    written for Lightning starts the same processes. ``fabric-core run`` is the launcher with more guarantees.

    Args:
        args: Lightning's ``run`` options (``script``, ``accelerator``, ``strategy``, ``devices``, ``num_nodes``,
            ``node_rank``, ``main_address``, ``main_port``).
        script_args: The script's own arguments.
    """
    from fabric_core.utilities._process_group import suggested_max_num_threads

    num_processes = 1 if args.strategy == "dp" else _get_num_processes(args.accelerator, args.devices)
    torchrun_args = [
        f"--nproc_per_node={num_processes}",
        f"--nnodes={args.num_nodes}",
        f"--node_rank={args.node_rank}",
        f"--master_addr={args.main_address}",
        f"--master_port={args.main_port}",
        str(args.script),
        *script_args,
    ]
    # The local processes share the CPUs (Lightning's default gives each of them all of them).
    os.environ.setdefault("OMP_NUM_THREADS", str(suggested_max_num_threads(max(num_processes, 1))))
    # Looked up at each call, as Lightning does, so that a stand-in in sys.modules is the one called.
    from torch.distributed.run import main as torchrun

    torchrun(torchrun_args)


def _weights_output(output: str) -> bool:
    """Whether ``fabric consolidate --output_file OUTPUT`` writes the model's weights as safetensors."""
    return output.endswith(("/", os.sep)) or output.lower().endswith(".safetensors")


def _click_commands() -> dict[str, Any]:
    """Lightning's ``fabric`` command group with its ``run`` and ``consolidate`` commands, by their names here.

    The options, their spellings, choices and defaults are Lightning's; ``run`` ends in :func:`main`, and
    ``consolidate`` calls this module's ``_process_cli_args``, ``_load_distributed_checkpoint`` and
    ``torch.save`` as they are at the time of the call (a test may replace any of them here).
    """
    import click

    from fabric_core.plugins.precision.precision import _PRECISION_INPUT_STR, _PRECISION_INPUT_STR_ALIAS

    this = sys.modules[__name__]

    @click.group()
    def _main() -> None:
        """Lightning Fabric's command line, on fabric-core."""

    @_main.command("run", context_settings={"ignore_unknown_options": True})
    @click.argument("script", type=click.Path(exists=True))
    @click.option("--accelerator", type=click.Choice(_SUPPORTED_ACCELERATORS), default=None, help="The kind of device.")
    @click.option(
        "--strategy",
        type=click.Choice(_get_supported_strategies()),
        default=None,
        help="How the processes share the work (`fabric-core list-plugins --kind strategy --all`).",
    )
    @click.option("--devices", type=str, default="1", help="Devices per node: a count, ids such as '0,1', or 'auto'.")
    @click.option("--num-nodes", "--num_nodes", type=int, default=1, help="How many machines run the job.")
    @click.option(
        "--node-rank", "--node_rank", type=int, default=0, help="This machine's index, from 0 to num_nodes - 1."
    )
    @click.option("--main-address", "--main_address", type=str, default="127.0.0.1", help="Host name or IP of node 0.")
    @click.option("--main-port", "--main_port", type=int, default=29400, help="The port node 0 listens on.")
    @click.option(
        "--precision",
        type=click.Choice(get_args(_PRECISION_INPUT_STR) + get_args(_PRECISION_INPUT_STR_ALIAS)),
        default=None,
        help="Numeric precision, e.g. 32-true, bf16-mixed, 16-mixed, 64-true.",
    )
    @click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
    def _run(**kwargs: Any) -> None:
        """Start SCRIPT on the processes (and nodes) the options ask for, through torchrun.

        SCRIPT is a Python file that creates a Fabric object; SCRIPT_ARGS are handed to it unchanged.
        `fabric-core run` takes the same options and adds restarts and workers tied to the launcher.
        """
        script_args = list(kwargs.pop("script_args", []))
        try:
            this.main(args=argparse.Namespace(**kwargs), script_args=script_args)
        except FabricCoreError as exc:  # a value Fabric(...) would refuse: one line, no traceback
            raise click.ClickException(str(exc)) from None

    @_main.command("consolidate", context_settings={"ignore_unknown_options": True})
    @click.argument("checkpoint_folder", type=click.Path(exists=True))
    @click.option(
        "--output_file",
        type=click.Path(),
        default=None,
        help="The file to write; it must not exist (default: the folder's path with '.consolidated' added).",
    )
    def _consolidate(checkpoint_folder: str, output_file: str | None) -> None:
        """Write the sharded checkpoint in CHECKPOINT_FOLDER as one file that `torch.load` reads.

        An output file ending in `.safetensors` gets the model's weights alone as one safetensors file, one
        ending in `/` as a Hugging Face folder (shards of at most 5GB); `fabric-core consolidate` has the options.
        """
        args = argparse.Namespace(checkpoint_folder=checkpoint_folder, output_file=output_file)
        config = this._process_cli_args(args)
        if output_file is not None and _weights_output(output_file):
            from fabric_core.io.distributed import consolidate

            try:
                consolidate(config.checkpoint_folder, output_file)
            except FabricCoreError as exc:
                raise click.ClickException(str(exc)) from None
            return
        checkpoint = this._load_distributed_checkpoint(config.checkpoint_folder)
        this.torch.save(checkpoint, config.output_file)

    return {"_main": _main, "_run": _run, "_consolidate": _consolidate}


_lightning_names = reexports(
    __name__, {"STRATEGY_REGISTRY": "fabric_core.strategies.registry"}, fallback=lightning_reexports(__name__)
)


def __getattr__(name: str) -> Any:
    """Lightning's names of this module, on first access: its click commands, ``torch`` and its re-exports."""
    if name == "torch":  # Lightning's module imports torch; here only once something asks for it
        return importlib.import_module("torch")
    if name in _CLICK_COMMANDS:
        if not _CLICK_AVAILABLE:
            raise AttributeError(
                f"module {__name__!r} has no attribute {name!r}: Lightning's `fabric` commands need click "
                "(`pip install click`); `fabric-core run` works without it."
            )
        try:
            commands = _click_commands()
        except AttributeError as exc:  # raised from here it would read "no attribute '_main'" and hide the cause
            raise RuntimeError(f"Lightning's `fabric` commands could not be built: {exc}") from exc
        globals().update(commands)  # built once
        return commands[name]
    return _lightning_names(name)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
