"""Decides the components for ``Fabric(...)`` arguments, through the catalog and the selection hooks.

:func:`select` decides everything and records why (:class:`Decision`), importing only the classes it must ask
about devices; it builds nothing but the cluster environment, whose answers (did a scheduler start the
processes, how many) decide the devices. :func:`fabric_core._fabric.assembly.build` then makes and connects the
objects; ``fabric-core explain`` prints the decisions without building anything.

Every way a component is given takes one path: a name or ``spec(...)`` goes through the selection hook and the
catalog whether it came as ``precision=`` or inside ``plugins=``, an instance is taken as it is, and each
becomes a :class:`Decision` that says which way it came.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fabric_core._kernel.arguments import (
    PRECISION_ALIASES,
    accelerator_label,
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
from fabric_core._kernel.context import Decision, SelectionContext
from fabric_core._kernel.manager import PluginManager, get_manager
from fabric_core._kernel.registry import Catalog, Entry, Spec, instance_kind
from fabric_core._logging import log_event
from fabric_core._signature import accepts
from fabric_core.errors import (
    AcceleratorUnavailableError,
    ArgumentTypeError,
    InvalidConfigError,
    UnknownNameError,
    UnknownPrecisionError,
)

__all__ = ["Choice", "Decision", "Selection", "SelectionContext", "select"]


@dataclass
class Choice:
    """One decided component: an instance the user passed, or a catalog entry and the options to build it with."""

    instance: Any = None
    entry: Entry | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Selection:
    """Everything :func:`select` decided; :func:`fabric_core._fabric.assembly.build` makes the objects."""

    context: SelectionContext
    decisions: list[Decision]
    accelerator: Choice
    environment: Choice
    strategy: Choice
    precision: Choice
    checkpoint_io: Any
    loggers: list[Choice]
    callbacks: list[Choice]
    #: The cluster environment passed in ``plugins=`` (an instance or a name); ``None`` where it was detected.
    environment_given: Any = None
    #: ``devices`` as the accelerator parsed it, ``"auto"`` counted first (Lightning's ``_devices_flag``).
    parsed_devices: Any = None
    #: What rank 0 tells the user when the components are built (a choice made for them, and why).
    notices: list[str] = field(default_factory=list)


#: How a component given inside ``Fabric(plugins=...)`` is recorded.
_IN_PLUGINS = "plugins="


def _is_interactive() -> bool:
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def _sort_plugins_argument(plugins: Any, catalog: Catalog) -> tuple[Any, Any, Any]:
    """Sort the items of ``Fabric(plugins=...)`` into (precision, checkpoint_io, environment), each at most once.

    Lightning calls these items plugins; here they are components like any other, and each is decided later
    exactly as its own argument would be.
    """
    if plugins is None:
        return None, None, None
    items = list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
    found: dict[str, Any] = {}
    given: dict[str, list[Any]] = {}  # what the user passed, for messages
    for item in items:
        if isinstance(item, (str, Spec)):
            name = name_and_options(item)[0]
            if catalog.find("environment", name) is not None:
                slot: Any = ("environment", item)
            elif catalog.find("precision", PRECISION_ALIASES.get(name, (name, False))[0]) is not None:
                slot = ("precision", item)
            else:
                choices = catalog.names("environment") + catalog.names("precision")
                raise UnknownNameError(
                    "precision or cluster environment",
                    name,
                    choices,
                    argument="Fabric(plugins=...)",
                    unavailable=catalog.unavailable,
                )
        elif (kind := instance_kind(item)) in _PLUGIN_TYPES:
            slot = (kind, item)
        else:
            raise ArgumentTypeError(
                f"Found invalid type for plugin {item!r}. Expected one of: Precision, CheckpointIO, "
                "ClusterEnvironment, or the name of a precision or cluster environment.",
                argument="plugins",
                value=item,
            )
        kind, value = slot
        found.setdefault(kind, value)
        given.setdefault(kind, []).append(item)
    repeated = [kind for kind in _PLUGIN_TYPES if len(given.get(kind, ())) > 1]
    if repeated:
        shown = "; ".join(f"{kind}: {', '.join(repr(i) for i in given[kind])}" for kind in repeated)
        raise InvalidConfigError(
            # Lightning's sentence, naming the base classes, then what was passed.
            f"Received multiple values for {', '.join(_PLUGIN_TYPES[k] for k in repeated)} flags in `plugins`. "
            f"Expected one value for each type at most; got {shown}.",
            argument="plugins",
            value=plugins,
        )
    return found.get("precision"), found.get("checkpoint_io"), found.get("environment")


#: The kinds of ``plugins=`` items, in Lightning's order, by the base class Lightning's messages name.
_PLUGIN_TYPES = {"precision": "Precision", "checkpoint_io": "CheckpointIO", "environment": "ClusterEnvironment"}


def _select_accelerator(
    manager: PluginManager, ctx: SelectionContext, accelerator: Any, decisions: list[Decision]
) -> tuple[Choice, SelectionContext]:
    check_type("accelerator", accelerator, "an Accelerator")
    if instance_kind(accelerator) == "accelerator":
        cls: type[Any] = type(accelerator)
        choice = Choice(instance=accelerator)
        decisions.append(Decision("accelerator", cls.__name__, "instance passed by the user"))
        # A class written for Lightning declares no device type: its devices tell it (see _select_devices).
        return choice, dataclasses.replace(
            ctx, accelerator=cls.__name__, accelerator_class=cls, device_type=getattr(cls, "device_type", None)
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
    decisions.append(_decided("accelerator", entry.name, reason, entry, plugin))
    return Choice(entry=entry, options=options), dataclasses.replace(
        ctx, accelerator=entry.name, accelerator_class=cls, device_type=cls.device_type
    )


def _answering_hook(plugin: str | None, step: str) -> str | None:
    """``"<plugin>.fabric_core_select_<step>"``: the selection hook implementation that answered, if one did."""
    return f"{plugin}.fabric_core_select_{step}" if plugin else None


def _select_devices(
    ctx: SelectionContext,
    devices: Any,
    decisions: list[Decision],
    environment: Any,
    strategy: Any,
    notices: list[str],
) -> tuple[SelectionContext, Any]:
    """Decide the devices (``devices`` normalised); returns the context and ``devices`` as the accelerator parsed it.

    Where the processes the scheduler started decide ``devices="auto"``, ``notices`` gets the sentence that says so.
    """
    cls: Any = ctx.accelerator_class
    assert cls is not None
    auto_strategy = isinstance(strategy, str) and strategy.strip().lower() == "auto"
    started = _started_topology(ctx, environment) if devices == "auto" and auto_strategy else None
    if started is None:
        parsed = cls.parse_devices(cls.auto_device_count() if devices == "auto" else devices)
        own = list(getattr(strategy, "parallel_devices", None) or ())  # a strategy instance's own devices win
        parallel = tuple(own or cls.get_parallel_devices(parsed))
        reason = f"devices={devices!r}" if not own else f"the devices of the {type(strategy).__name__} passed"
        decisions.append(Decision("devices", ", ".join(str(d) for d in parallel), reason))
        device_type = ctx.device_type or (getattr(parallel[0], "type", None) if parallel else None)
        return dataclasses.replace(ctx, devices=devices, parallel_devices=parallel, device_type=device_type), parsed
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
    notices.append(_inferred(ctx.environment, per_node, nodes, num_nodes))
    return dataclasses.replace(
        ctx, devices="auto", parallel_devices=parallel, num_nodes=num_nodes, devices_from_environment=True
    ), parsed


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


def _inferred(environment: str | None, per_node: int, nodes: int, num_nodes: int) -> str:
    return (
        f"{environment} started {per_node * nodes} processes ({per_node} per node x {nodes} node(s)): "
        f"using `devices={per_node}, num_nodes={num_nodes}` for `devices='auto'`, so they train as one job. "
        "Pass `devices=1` to train one independent copy per process instead."
    )


def _select_environment(
    ctx: SelectionContext, given: Any, decisions: list[Decision]
) -> tuple[Choice, SelectionContext]:
    """Decide the cluster environment: the one component built while deciding, as its answers decide devices."""
    entry: Entry | None = None
    if isinstance(given, (str, Spec)):
        name, options = name_and_options(given)
        entry = ctx.catalog.get("environment", name, argument="Fabric(plugins=...)")
        instance, reason = entry.build(options), f"passed in {_IN_PLUGINS}"
    elif given is not None:
        instance, reason = given, f"instance passed in {_IN_PLUGINS}"
    else:
        candidates = sorted(ctx.catalog.selectable("environment"), key=lambda e: -e.priority)
        entry = next((e for e in candidates if e.is_available()), None)
        if entry is None:
            raise InvalidConfigError("No cluster environment is registered; is the built-in plugin blocked?")
        instance, reason = entry.build(), "detected by its probe"
    name = entry.name if entry is not None else type(instance).__name__
    decisions.append(_decided("environment", name, reason, entry))
    return Choice(instance=instance), dataclasses.replace(
        ctx, environment=name, creates_processes_externally=bool(instance.creates_processes_externally)
    )


def _decided(
    step: str, value: str, reason: str, entry: Entry | None, answered_by: str | None = None, where: str | None = None
) -> Decision:
    """The record of one decision: ``answered_by`` is the plugin whose selection hook answered, ``where`` the
    argument the component came in when it is not its own (``"plugins="``)."""
    if where is not None:
        reason = f"{reason} (in {where})"
    if entry is None:
        return Decision(step, value, reason)
    return Decision(
        step, value, reason, plugin=entry.plugin, hook=_answering_hook(answered_by, step), target=entry.target
    )


def _select_strategy(
    manager: PluginManager, ctx: SelectionContext, strategy: Any, decisions: list[Decision]
) -> tuple[Choice, SelectionContext]:
    check_type("strategy", strategy, "a Strategy")
    if instance_kind(strategy) == "strategy":
        cls: type[Any] = type(strategy)
        decisions.append(Decision("strategy", cls.__name__, "instance passed by the user"))
        return Choice(instance=strategy), dataclasses.replace(ctx, strategy=cls.__name__, strategy_class=cls)
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
    decisions.append(_decided("strategy", entry.name, reason, entry, plugin))
    cls = entry.load()
    return Choice(entry=entry, options=options), dataclasses.replace(ctx, strategy=entry.name, strategy_class=cls)


def _select_precision(
    manager: PluginManager, ctx: SelectionContext, precision: Any, decisions: list[Decision], where: str | None
) -> tuple[Choice, SelectionContext]:
    """Decide the precision given as ``precision=`` or (``where="plugins="``) inside ``plugins=``: one path."""
    if instance_kind(precision) == "precision":
        reason = f"instance passed in {where}" if where else "instance passed by the user"
        decisions.append(Decision("precision", type(precision).__name__, reason))
        return Choice(instance=precision), dataclasses.replace(ctx, precision=type(precision).precision)
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
        raise UnknownPrecisionError(precision, name, choices, unavailable=ctx.catalog.unavailable)
    factory = entry.load()
    if "device" not in options and accepts(factory, "device"):
        options["device"] = ctx.device_type
    reason = "requested" if name == requested else f"{requested!r} resolved to {name!r}"
    decisions.append(_decided("precision", entry.name, reason, entry, plugin, where))
    return Choice(entry=entry, options=options), dataclasses.replace(ctx, precision=requested)


def _select_many(catalog: Catalog, kind: str, values: Any, decisions: list[Decision]) -> list[Choice]:
    if values is None:
        return []
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    choices = []
    for item in items:
        if isinstance(item, (str, Spec)):
            name, options = name_and_options(item)
            entry = catalog.get(kind, name, argument=f"Fabric({kind}s=...)")
            choices.append(Choice(entry=entry, options=options))
            decisions.append(Decision(kind, entry.name, "requested", plugin=entry.plugin, target=entry.target))
        elif item is None:
            raise InvalidConfigError(f"`Fabric({kind}s=...)` contains None.", argument=f"{kind}s", value=values)
        else:
            if kind == "logger":
                check_logger(item, values, catalog.names(kind))
            choices.append(Choice(instance=item))
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
    interactive: bool | None = None,
) -> Selection:
    """Decide every component for ``Fabric(...)`` arguments (see ``Fabric`` for their meaning).

    ``interactive`` says whether this runs in a notebook or REPL; by default it is detected.

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
        catalog=catalog,
        num_nodes=validate_num_nodes(args["num_nodes"]),
        interactive=_is_interactive() if interactive is None else interactive,
    )
    devices = normalize_devices(args["devices"], args["accelerator"])  # refused before anything is selected
    precision_in_plugins, checkpoint_io, environment_in_plugins = _sort_plugins_argument(plugins, catalog)
    check_one_precision(args["precision"], precision_in_plugins)
    _check_strategy_instance(args)
    accelerator = _accelerator_of_strategy_instance(catalog, args)
    acc_choice, ctx = _select_accelerator(manager, ctx, accelerator, decisions)
    # The environment before the devices: a scheduler that started the processes decides `devices="auto"`.
    env_choice, ctx = _select_environment(ctx, environment_in_plugins, decisions)
    notices: list[str] = []
    ctx, parsed_devices = _select_devices(ctx, devices, decisions, env_choice.instance, args["strategy"], notices)
    strategy_choice, ctx = _select_strategy(manager, ctx, args["strategy"], decisions)
    if precision_in_plugins is not None:
        precision_choice, ctx = _select_precision(manager, ctx, precision_in_plugins, decisions, _IN_PLUGINS)
    else:
        precision_choice, ctx = _select_precision(manager, ctx, args["precision"], decisions, None)
    if checkpoint_io is not None:
        decisions.append(Decision("checkpoint_io", type(checkpoint_io).__name__, f"instance passed in {_IN_PLUGINS}"))
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
        environment_given=environment_in_plugins,
        parsed_devices=parsed_devices,
        notices=notices,
    )
    log_event("selection", level="info", **{d.step: d.value for d in decisions})
    return selection


def _check_strategy_instance(args: Mapping[str, Any]) -> None:
    """A strategy instance that carries its own accelerator or precision must not contradict the arguments.

    Raises:
        InvalidConfigError: The instance has an accelerator (a precision) and ``accelerator=`` (``precision=``)
            is given too.
    """
    instance = args["strategy"]
    if isinstance(instance, (str, Spec)):
        return
    for arg, attr in (("accelerator", "_accelerator"), ("precision", "_precision")):
        if getattr(instance, attr, None) is not None and args[arg] not in (None, "auto"):
            raise InvalidConfigError(
                f"{arg} set through both the strategy instance and `Fabric({arg}={args[arg]!r})`; choose one.",
                argument=arg,
                value=args[arg],
            )


def _accelerator_of_strategy_instance(catalog: Catalog, args: Mapping[str, Any]) -> Any:
    """The ``accelerator`` to decide from: a strategy instance's own accelerator or devices decide ``"auto"``.

    A strategy built with ``parallel_devices`` runs on those: ``"auto"`` becomes the accelerator of their device
    type (the highest priority one, as for ``"auto"``), and a named accelerator of another device type is refused.

    Raises:
        InvalidConfigError: The strategy's devices are of another type than the named accelerator's.
    """
    accelerator, instance = args["accelerator"], args["strategy"]
    if isinstance(instance, (str, Spec)):
        return accelerator
    own = getattr(instance, "_accelerator", None)
    if own is not None:
        return own  # `accelerator=` is "auto" here: _check_strategy_instance refused both
    devices = list(getattr(instance, "parallel_devices", None) or ())
    if not devices:
        return accelerator
    device_type = getattr(devices[0], "type", None)
    if isinstance(accelerator, (str, Spec)) and name_and_options(accelerator)[0] == "auto":
        for entry in sorted(catalog.selectable("accelerator"), key=lambda e: -e.priority):
            if getattr(entry.load(), "device_type", None) == device_type:
                return entry.name
        return accelerator
    if isinstance(accelerator, (str, Spec)):
        named = catalog.find("accelerator", name_and_options(accelerator)[0])
        cls = named.load() if named is not None else None  # "gpu": resolved by a hook, checked when built
    else:
        cls = type(accelerator)
    if cls is not None and getattr(cls, "device_type", None) != device_type:
        label = accelerator_label(accelerator)
        raise InvalidConfigError(
            # Lightning's sentence, then ours.
            f"{str(device_type).upper()} parallel_devices set through {type(instance).__name__} class, but "
            f"accelerator set to {label}, please choose one device type. The {label!r} accelerator runs on "
            f"{cls.device_type} devices: pass devices of that type, or `accelerator='auto'` to run on the "
            "strategy's devices.",
            argument="accelerator",
            value=accelerator,
        )
    return accelerator
