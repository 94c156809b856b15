"""Resolves ``Fabric(...)`` arguments into components, through the catalog and the selection hooks.

:func:`select` decides everything and records why (:class:`Decision`), importing only the classes it
must ask about devices; :meth:`Selection.build` then builds the objects. ``fabric-core explain`` prints the
decisions without building anything.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, final

from fabric_core._arguments import (
    PRECISION_ALIASES,
    check_device_count,
    check_logger,
    check_one_precision,
    check_type,
    from_environment,
    merge,
    name_and_options,
    normalize_devices,
    normalize_precision,
    validate_num_nodes,
)
from fabric_core._logging import log_event
from fabric_core._manager import PluginManager, get_manager
from fabric_core._registry import Catalog, Entry, Spec
from fabric_core._signature import accepts
from fabric_core.errors import (
    AcceleratorUnavailableError,
    ArgumentTypeError,
    InvalidConfigError,
    UnknownNameError,
)

__all__ = ["Components", "Decision", "Selection", "SelectionContext", "select"]


@final
@dataclass(frozen=True)
class SelectionContext:
    """What selection knows at each step; hooks receive it and must not change it.

    Attributes:
        catalog: Every registered component.
        accelerator: The chosen accelerator's name (its class name for an instance).
        accelerator_class: Its class.
        device_type: ``torch.device`` type of its devices (``"cpu"``, ``"cuda"``).
        devices: ``devices`` as passed.
        parallel_devices: One device per local process.
        num_nodes: Number of nodes.
        environment: The cluster environment's name.
        creates_processes_externally: Whether a scheduler or launcher started this job's processes.
        strategy: The chosen strategy's name (its class name for an instance).
        strategy_class: Its class.
        precision: The precision in canonical form (``"bf16-mixed"``).
        interactive: Whether this runs in a notebook or REPL.
        devices_from_environment: Whether ``devices="auto"`` (and ``num_nodes``) came from the processes the
            cluster environment started (its ``topology()``), which then exist already.
    """

    catalog: Catalog
    accelerator: str | None = None
    accelerator_class: type | None = None
    device_type: str | None = None
    devices: Any = "auto"
    parallel_devices: tuple[Any, ...] = ()
    num_nodes: int = 1
    environment: str | None = None
    creates_processes_externally: bool = False
    strategy: str | None = None
    strategy_class: type | None = None
    precision: str | None = None
    interactive: bool = False
    devices_from_environment: bool = False

    @property
    def num_processes(self) -> int:
        """Processes per node (one per device)."""
        return max(len(self.parallel_devices), 1)

    @property
    def world_size(self) -> int:
        return self.num_processes * self.num_nodes


@final
@dataclass(frozen=True)
class Decision:
    """One step of selection: what was chosen, by whom and why (shown by ``fabric-core explain``)."""

    step: str
    value: str
    reason: str
    plugin: str | None = None
    hook: str | None = None
    target: str | None = None


@dataclass
class Components:
    """The objects ``Fabric`` runs with; the strategy is connected to the others."""

    accelerator: Any
    strategy: Any
    precision: Any
    cluster_environment: Any
    checkpoint_io: Any
    loggers: list[Any]
    callbacks: list[Any]
    #: The cluster environment started the processes and `devices="auto"` counted them: join them at once.
    processes_exist: bool = False


@dataclass
class _Choice:
    """A component chosen either as an instance or as a catalog entry with options."""

    instance: Any = None
    entry: Entry | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def build(self) -> Any:
        if self.instance is not None:
            return self.instance
        assert self.entry is not None
        return self.entry.build(self.options)


@dataclass
class Selection:
    """Everything :func:`select` decided; :meth:`build` makes the objects."""

    context: SelectionContext
    decisions: list[Decision]
    accelerator: _Choice
    environment: _Choice
    strategy: _Choice
    precision: _Choice
    checkpoint_io: Any
    loggers: list[_Choice]
    callbacks: list[_Choice]

    def build(self) -> Components:
        """Build and connect the components (imports the chosen classes)."""
        accelerator = self.accelerator.build()
        environment = self.environment.build()
        precision = self.precision.build()
        strategy = self.strategy.build()
        strategy.connect(
            accelerator=accelerator,
            precision=precision,
            checkpoint_io=self.checkpoint_io,
            cluster_environment=environment,
            parallel_devices=list(self.context.parallel_devices),
            num_nodes=self.context.num_nodes,
        )
        launcher = getattr(strategy, "launcher", None)
        if self.context.interactive and launcher is not None and not launcher.is_interactive_compatible:
            raise InvalidConfigError(
                f"`Fabric(strategy={self.context.strategy!r})` is not compatible with an interactive "
                "environment. Run your code as a script, or choose a strategy that forks, e.g. "
                "`Fabric(strategy='ddp_notebook')`.",
                argument="strategy",
                value=self.context.strategy,
            )
        return Components(
            accelerator=strategy.accelerator,
            strategy=strategy,
            precision=strategy.precision,
            cluster_environment=environment,
            checkpoint_io=strategy.checkpoint_io,
            loggers=[c.build() for c in self.loggers],
            callbacks=[c.build() for c in self.callbacks],
            processes_exist=self.context.devices_from_environment,
        )


def _is_interactive() -> bool:
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def _sort_plugins(plugins: Any, catalog: Catalog) -> tuple[Any, Any, Any]:
    """Split ``plugins=`` into (precision, checkpoint_io, environment); each at most once."""
    from fabric_core.environments.environment import ClusterEnvironment
    from fabric_core.io.checkpoint_io import CheckpointIO
    from fabric_core.precision.precision import Precision

    if plugins is None:
        return None, None, None
    items = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    found: dict[str, Any] = {}
    given: dict[str, Any] = {}  # what the user passed, for messages
    for item in items:
        if isinstance(item, (str, Spec)):
            name, options = name_and_options(item)
            entry = catalog.find("environment", name)
            if entry is not None:
                slot: Any = ("environment", _Choice(entry=entry, options=options))
            elif catalog.find("precision", PRECISION_ALIASES.get(name, (name, False))[0]) is not None:
                # Resolved later exactly as `precision=` is: selection hooks, aliases, device injection.
                slot = ("precision", item)
            else:
                choices = catalog.names("environment") + catalog.names("precision")
                raise UnknownNameError(
                    "plugin", name, choices, argument="Fabric(plugins=...)", unavailable=catalog.unavailable
                )
        elif isinstance(item, Precision):
            slot = ("precision", item)
        elif isinstance(item, CheckpointIO):
            slot = ("checkpoint_io", item)
        elif isinstance(item, ClusterEnvironment):
            slot = ("environment", item)
        else:
            raise ArgumentTypeError(
                f"Found invalid type for plugin {item!r}. Expected one of: Precision, CheckpointIO, "
                "ClusterEnvironment, or the name of a precision or cluster environment.",
                argument="plugins",
                value=item,
            )
        kind, value = slot
        if kind in found:
            raise InvalidConfigError(
                f"Received multiple values for {kind} in `plugins`: {given[kind]!r} and {item!r}. "
                "Expected one value for each type at most.",
                argument="plugins",
                value=plugins,
            )
        found[kind], given[kind] = value, item
    return found.get("precision"), found.get("checkpoint_io"), found.get("environment")


def _select_accelerator(
    manager: PluginManager, ctx: SelectionContext, accelerator: Any, decisions: list[Decision]
) -> tuple[_Choice, SelectionContext]:
    from fabric_core.accelerators.accelerator import Accelerator

    check_type("accelerator", accelerator, Accelerator, "an Accelerator")
    if isinstance(accelerator, Accelerator):
        cls: type[Any] = type(accelerator)
        choice = _Choice(instance=accelerator)
        decisions.append(Decision("accelerator", cls.__name__, "instance passed by the user"))
        return choice, dataclasses.replace(
            ctx, accelerator=cls.__name__, accelerator_class=cls, device_type=cls.device_type
        )
    requested, options = name_and_options(accelerator)
    answer, plugin = manager.select_accelerator(requested, ctx)
    name, options = merge(answer, options)
    entry = ctx.catalog.get("accelerator", name, argument="Fabric(accelerator=...)")
    cls = entry.load()
    if not (entry.is_available() if entry.probe else cls.is_available()):
        available = [e.name for e in ctx.catalog.selectable("accelerator") if e.is_available()]
        raise AcceleratorUnavailableError(
            f"`{cls.__name__}` can not run on your system since the accelerator is not available. The "
            f"following accelerator(s) are available and can be passed as `Fabric(accelerator=...)`: "
            f"{available}.",
            argument="accelerator",
            value=accelerator,
        )
    reason = "requested" if name == requested else f"{requested!r} resolved to {name!r}"
    decisions.append(
        Decision(
            "accelerator",
            entry.name,
            reason,
            plugin=entry.plugin,
            hook=_hook(plugin, "accelerator"),
            target=entry.target,
        )
    )
    return _Choice(entry=entry, options=options), dataclasses.replace(
        ctx, accelerator=entry.name, accelerator_class=cls, device_type=cls.device_type
    )


def _hook(plugin: str | None, what: str) -> str | None:
    return f"{plugin}.fabric_core_select_{what}" if plugin else None


def _select_devices(
    ctx: SelectionContext, devices: Any, decisions: list[Decision], environment: Any, strategy: Any
) -> SelectionContext:
    cls: Any = ctx.accelerator_class
    assert cls is not None
    devices = normalize_devices(devices, ctx.accelerator or cls.__name__)
    auto_strategy = isinstance(strategy, str) and strategy.strip().lower() == "auto"
    started = _started_topology(ctx, environment) if devices == "auto" and auto_strategy else None
    if started is None:
        parsed = cls.auto_device_count() if devices == "auto" else cls.parse_devices(devices)
        parallel = tuple(cls.get_parallel_devices(parsed))
        decisions.append(Decision("devices", ", ".join(str(d) for d in parallel), f"devices={devices!r}"))
        return dataclasses.replace(ctx, devices=devices, parallel_devices=parallel)
    # The scheduler started the processes: they are one job, with one device per process of a node.
    per_node, nodes = started
    try:
        parsed = cls.parse_devices(per_node)
    except InvalidConfigError as error:
        raise InvalidConfigError(
            f"{ctx.environment} started {per_node} processes per node, so `devices='auto'` means {per_node} "
            f"devices per node, which the {ctx.accelerator} accelerator refuses: {error} Start at most one process "
            "per device, or pass `devices=1` to run one independent copy per process.",
            argument="devices",
            value="auto",
        ) from None
    parallel = tuple(cls.get_parallel_devices(parsed))
    num_nodes = nodes if ctx.num_nodes == 1 else ctx.num_nodes  # an explicit num_nodes wins
    reason = f"devices='auto': {per_node} per node x {nodes} node(s), as {ctx.environment} started them"
    decisions.append(Decision("devices", ", ".join(str(d) for d in parallel), reason))
    if num_nodes != ctx.num_nodes:
        decisions.append(Decision("num_nodes", str(num_nodes), f"num_nodes=1 (the default): as {ctx.environment}"))
    log_event("devices_inferred", level="info", environment=ctx.environment, devices=per_node, num_nodes=num_nodes)
    _tell_inferred(ctx.environment, per_node, nodes, num_nodes)
    return dataclasses.replace(
        ctx, devices="auto", parallel_devices=parallel, num_nodes=num_nodes, devices_from_environment=True
    )


def _started_topology(ctx: SelectionContext, environment: Any) -> tuple[int, int] | None:
    """``(processes per node, nodes)`` of a job whose processes a scheduler started, if it says."""
    if not ctx.creates_processes_externally:
        return None
    topology = getattr(environment, "topology", None)
    started = topology() if callable(topology) else None
    if started is None:
        return None
    per_node, nodes = started
    return (int(per_node), int(nodes)) if per_node >= 1 and nodes >= 1 else None


def _tell_inferred(environment: str | None, per_node: int, nodes: int, num_nodes: int) -> None:
    from fabric_core.utilities.rank_zero import rank_zero_info

    rank_zero_info(
        f"{environment} started {per_node * nodes} processes ({per_node} per node x {nodes} node(s)): "
        f"using `devices={per_node}, num_nodes={num_nodes}` for `devices='auto'`, so they train as one job. "
        "Pass `devices=1` to train one independent copy per process instead."
    )


def _select_environment(
    ctx: SelectionContext, explicit: Any, decisions: list[Decision]
) -> tuple[_Choice, SelectionContext]:
    if isinstance(explicit, _Choice):
        choice, name = explicit, explicit.entry.name if explicit.entry else "?"
        reason = "passed in plugins="
    elif explicit is not None:
        choice, name, reason = _Choice(instance=explicit), type(explicit).__name__, "instance passed in plugins="
    else:
        candidates = sorted(ctx.catalog.selectable("environment"), key=lambda e: -e.priority)
        entry = next((e for e in candidates if e.is_available()), None)
        if entry is None:
            raise InvalidConfigError("No cluster environment is registered; is the built-in plugin blocked?")
        choice, name, reason = _Choice(entry=entry), entry.name, "detected by its probe"
    instance = choice.build()
    choice = _Choice(instance=instance)
    decisions.append(Decision("environment", name, reason))
    return choice, dataclasses.replace(
        ctx, environment=name, creates_processes_externally=bool(instance.creates_processes_externally)
    )


def _select_strategy(
    manager: PluginManager, ctx: SelectionContext, strategy: Any, decisions: list[Decision]
) -> tuple[_Choice, SelectionContext]:
    from fabric_core.strategies.strategy import Strategy

    check_type("strategy", strategy, Strategy, "a Strategy")
    if isinstance(strategy, Strategy):
        cls: type[Any] = type(strategy)
        decisions.append(Decision("strategy", cls.__name__, "instance passed by the user"))
        return _Choice(instance=strategy), dataclasses.replace(ctx, strategy=cls.__name__, strategy_class=cls)
    requested, options = name_and_options(strategy)
    answer, plugin = manager.select_strategy(requested, ctx)
    name, options = merge(answer, options)
    if name == "auto":
        raise InvalidConfigError(
            f"No installed plugin provides a strategy for {ctx.world_size} processes "
            f"({ctx.num_processes} device(s) x {ctx.num_nodes} node(s)). To get one: `pip install "
            "fabric-core-ddp`, or pass `Fabric(devices=1)`.",
            argument="strategy",
            value=strategy,
        )
    entry = ctx.catalog.get("strategy", name, argument="Fabric(strategy=...)")
    reason = "requested" if name == requested else f"{requested!r} resolved to {name!r}"
    decisions.append(
        Decision(
            "strategy", entry.name, reason, plugin=entry.plugin, hook=_hook(plugin, "strategy"), target=entry.target
        )
    )
    cls = entry.load()
    return _Choice(entry=entry, options=options), dataclasses.replace(ctx, strategy=entry.name, strategy_class=cls)


def _select_precision(
    manager: PluginManager, ctx: SelectionContext, precision: Any, decisions: list[Decision]
) -> tuple[_Choice, SelectionContext]:
    from fabric_core.precision.precision import Precision

    if isinstance(precision, Precision):
        decisions.append(Decision("precision", type(precision).__name__, "instance passed by the user"))
        return _Choice(instance=precision), dataclasses.replace(ctx, precision=type(precision).precision)
    if isinstance(precision, Spec):
        requested, options = name_and_options(precision)
        requested = normalize_precision(requested)
    else:
        requested, options = normalize_precision(precision), {}
    answer, plugin = manager.select_precision(requested, dataclasses.replace(ctx, precision=requested))
    name, options = merge(answer, options)
    entry = ctx.catalog.find("precision", name)
    if entry is None:
        choices = ctx.catalog.names("precision") + list(PRECISION_ALIASES)
        raise UnknownNameError(
            "precision", name, choices, argument="Fabric(precision=...)", unavailable=ctx.catalog.unavailable
        )
    factory = entry.load()
    if "device" not in options and accepts(factory, "device"):
        options["device"] = ctx.device_type
    reason = "requested" if name == requested else f"{requested!r} resolved to {name!r}"
    decisions.append(
        Decision(
            "precision", entry.name, reason, plugin=entry.plugin, hook=_hook(plugin, "precision"), target=entry.target
        )
    )
    return _Choice(entry=entry, options=options), dataclasses.replace(ctx, precision=requested)


def _select_many(catalog: Catalog, kind: str, values: Any, decisions: list[Decision]) -> list[_Choice]:
    if values is None:
        return []
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    choices = []
    for item in items:
        if isinstance(item, (str, Spec)):
            name, options = name_and_options(item)
            entry = catalog.get(kind, name, argument=f"Fabric({kind}s=...)")
            choices.append(_Choice(entry=entry, options=options))
            decisions.append(Decision(kind, entry.name, "requested", plugin=entry.plugin, target=entry.target))
        elif item is None:
            raise InvalidConfigError(f"`Fabric({kind}s=...)` contains None.", argument=f"{kind}s", value=values)
        else:
            if kind == "logger":
                check_logger(item, values, catalog.names(kind))
            choices.append(_Choice(instance=item))
            decisions.append(Decision(kind, type(item).__name__, "instance passed by the user"))
    return choices


def select(
    manager: PluginManager | None = None,
    *,
    accelerator: Any = "auto",
    strategy: Any = "auto",
    devices: Any = "auto",
    num_nodes: Any = 1,
    precision: Any = None,
    plugins: Any = None,
    loggers: Any = None,
    callbacks: Any = None,
    environ: Mapping[str, str] | None = None,
) -> Selection:
    """Decide every component for ``Fabric(...)`` arguments (see ``Fabric`` for their meaning).

    Raises:
        UnknownNameError: A name no installed plugin provides (with close matches and an install hint).
        AmbiguousNameError: A name two plugins provide.
        InvalidConfigError: A bad value or a combination that cannot run.
    """
    manager = manager or get_manager()
    env = os.environ if environ is None else environ
    args = from_environment(
        {
            "accelerator": accelerator,
            "strategy": strategy,
            "devices": devices,
            "num_nodes": num_nodes,
            "precision": precision,
        },
        env,
    )
    catalog = manager.catalog
    decisions: list[Decision] = []
    ctx = SelectionContext(
        catalog=catalog, num_nodes=validate_num_nodes(args["num_nodes"]), interactive=_is_interactive()
    )
    plugin_precision, checkpoint_io, plugin_environment = _sort_plugins(plugins, catalog)
    check_one_precision(args["precision"], plugin_precision)
    acc_choice, ctx = _select_accelerator(manager, ctx, args["accelerator"], decisions)
    # The environment before the devices: a scheduler that started the processes decides `devices="auto"`.
    env_choice, ctx = _select_environment(ctx, plugin_environment, decisions)
    ctx = _select_devices(ctx, args["devices"], decisions, env_choice.instance, args["strategy"])
    strategy_choice, ctx = _select_strategy(manager, ctx, args["strategy"], decisions)
    _check_strategy_instance(strategy_choice, args)
    check_device_count(ctx, args, strategy_choice.instance)
    precision_arg = plugin_precision if plugin_precision is not None else args["precision"]
    precision_choice, ctx = _select_precision(manager, ctx, precision_arg, decisions)
    manager.validate_selection(ctx)
    selection = Selection(
        context=ctx,
        decisions=decisions,
        accelerator=acc_choice,
        environment=env_choice,
        strategy=strategy_choice,
        precision=precision_choice,
        checkpoint_io=checkpoint_io,
        loggers=_select_many(catalog, "logger", loggers, decisions),
        callbacks=_select_many(catalog, "callback", callbacks, decisions),
    )
    log_event("selection", level="info", **{d.step: d.value for d in decisions})
    return selection


def _check_strategy_instance(choice: _Choice, args: Mapping[str, Any]) -> None:
    """A strategy instance that carries its own accelerator or precision must not contradict the flags."""
    instance = choice.instance
    if instance is None:
        return
    for arg, attr in (("accelerator", "_accelerator"), ("precision", "_precision")):
        if getattr(instance, attr, None) is not None and args[arg] not in (None, "auto"):
            raise InvalidConfigError(
                f"{arg} set through both the strategy instance and `Fabric({arg}={args[arg]!r})`; choose one.",
                argument=arg,
                value=args[arg],
            )
