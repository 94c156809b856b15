"""The hook specifications: the name, arguments and meaning of every hook a plugin implements.

Plugins import the contract from :mod:`fabric_core.plugin_api` (``hookimpl``, ``Registry``,
``SelectionContext``, ...); this module is where each hook is declared and documented, and what the plugin
manager hands to pluggy. It imports no fabric-core module at run time, so anything may import it.

Three families of hooks:

* **Registration** (``fabric_core_register_*``): called once per plugin manager, at discovery. Each receives
  a :class:`~fabric_core.plugin_api.Registry` for one kind of component and calls ``registry.add(...)``;
  ``fabric_core_register_modules`` declares the Lightning import paths the plugin's modules serve.
* **Selection** (``fabric_core_select_*``, ``firstresult``): called while ``Fabric(...)`` decides its
  components. Each maps what the user asked for to the catalog name that serves it here. The first plugin
  to return something other than ``None`` decides; the core's own answer is a ``trylast`` implementation.
  The plugin manager calls the implementations one by one rather than through pluggy's caller, to isolate a
  broken plugin (see :mod:`fabric_core.plugin_api`).
* **Validation** (``fabric_core_validate_selection``): called with the final selection; raise
  :class:`~fabric_core.errors.InvalidConfigError` to reject a combination.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pluggy

if TYPE_CHECKING:
    from fabric_core._kernel.context import SelectionContext
    from fabric_core._kernel.registry import ModuleRegistry, Registry, Spec

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT: Final = "fabric_core"
hookspec: Final = pluggy.HookspecMarker(PROJECT)
hookimpl: Final = pluggy.HookimplMarker(PROJECT)


@hookspec
def fabric_core_register_accelerators(registry: Registry) -> None:
    """Register accelerators (``"cpu"``, ``"cuda"``, ...).

    Called once per plugin manager, when its catalog is first needed. The target is an
    :class:`~fabric_core.accelerators.Accelerator` subclass. Give a ``probe`` and a ``priority`` so that
    ``accelerator="auto"`` can consider it: probes run from the highest priority down and the first
    available accelerator wins (built-in cpu: priority 0).

    Args:
        registry: Call ``registry.add(name, "module:Class", description=..., ...)`` on it.
    """


@hookspec
def fabric_core_register_strategies(registry: Registry) -> None:
    """Register strategies (``"single_device"``, ``"ddp"``, ...).

    Called once per plugin manager. The target is a :class:`~fabric_core.strategies.Strategy` subclass;
    parameterised names are aliases with ``defaults`` (``"ddp_spawn"`` = ``{"start_method": "spawn"}``).

    Args:
        registry: Call ``registry.add(...)`` on it.
    """


@hookspec
def fabric_core_register_precisions(registry: Registry) -> None:
    """Register precision plugins (``"32-true"``, ``"bf16-mixed"``, ``"nf4"``, ...).

    Called once per plugin manager. The target is a :class:`~fabric_core.precision.Precision` subclass.
    A strategy that needs its own precision class registers it under its own name and maps the user's
    precision string to it in :func:`fabric_core_select_precision`.

    Args:
        registry: Call ``registry.add(...)`` on it.
    """


@hookspec
def fabric_core_register_environments(registry: Registry) -> None:
    """Register cluster environments (``"slurm"``, ``"torchelastic"``, ...).

    Called once per plugin manager. The target is a
    :class:`~fabric_core.environments.ClusterEnvironment` subclass. Its ``probe`` says whether the current
    process runs under that environment; detection tries probes from the highest priority down and falls
    back to ``"lightning"``. An environment whose scheduler starts the processes should implement
    ``topology()`` (processes per node, nodes): ``Fabric(devices="auto")`` then runs them as one job.

    Args:
        registry: Call ``registry.add(...)`` on it.
    """


@hookspec
def fabric_core_register_loggers(registry: Registry) -> None:
    """Register loggers selectable as ``Fabric(loggers="name")`` or ``spec("name", ...)``.

    Called once per plugin manager. The target is a :class:`~fabric_core.loggers.Logger` subclass.

    Args:
        registry: Call ``registry.add(...)`` on it.
    """


@hookspec
def fabric_core_register_callbacks(registry: Registry) -> None:
    """Register callbacks selectable as ``Fabric(callbacks="name")`` or ``spec("name", ...)``.

    Called once per plugin manager. The target is any class whose instances have methods named after the
    events passed to ``fabric.call(...)``.

    Args:
        registry: Call ``registry.add(...)`` on it.
    """


@hookspec
def fabric_core_register_runners(registry: Registry) -> None:
    """Register runners: the ways ``fabric-core run --launcher NAME SCRIPT`` can start a script.

    Called once per plugin manager. The target is a callable ``runner(args, manager) -> int``: it receives
    the parsed ``fabric-core run`` options (an ``argparse.Namespace``; the script, its arguments and the
    names are checked already) and the plugin manager, starts the script, and returns the exit status. The
    callable may have an attribute ``add_arguments(group)``, called with an ``argparse`` argument group when
    ``fabric-core run`` builds its options, to declare the options only this runner takes (they are refused
    under any other ``--launcher``). The built-in ``"torchrun"`` is the default.

    Args:
        registry: Call ``registry.add(...)`` on it.
    """


@hookspec
def fabric_core_register_modules(registry: ModuleRegistry) -> None:
    """Declare the Lightning module paths this plugin provides, so that ``fabric_core.<path>`` imports.

    Called once per plugin manager, with the other registration hooks. ``registry.add("strategies.ddp",
    "fabric_core_ddp.ddp")`` makes ``import fabric_core.strategies.ddp`` (and the attribute
    ``fabric_core.strategies.ddp``) give the module ``fabric_core_ddp.ddp`` itself, imported only then. Use
    Lightning Fabric's path for the classes the module holds (``lightning.fabric.strategies.ddp``), so that
    code changing only its import prefix finds them. A module the core itself has at a path always wins.

    Args:
        registry: Call ``registry.add(path, module)`` on it; it records strings and imports nothing.
    """


@hookspec(firstresult=True)
def fabric_core_select_accelerator(requested: str, context: SelectionContext) -> str | Spec | None:
    """Map the requested accelerator name to the catalog entry that serves it.

    Called once per ``Fabric(...)`` whose ``accelerator`` is a string, before the catalog lookup. Use it
    for names that are a choice between entries (``"gpu"`` means mps where available, else cuda).

    Args:
        requested: The lower-cased string the user passed (``"auto"``, ``"gpu"``, ``"cuda"``, ...).
        context: What is known so far (devices and num_nodes as passed, the catalog).

    Returns:
        A catalog name or :class:`~fabric_core.plugin_api.Spec`, or ``None`` to leave the decision to others. The
        core's fallback runs probes for ``"auto"`` and otherwise returns ``requested`` unchanged.
    """


@hookspec(firstresult=True)
def fabric_core_select_strategy(requested: str, context: SelectionContext) -> str | Spec | None:
    """Map the requested strategy name to the catalog entry that serves it on this accelerator.

    Called once per ``Fabric(...)`` whose ``strategy`` is a string, after the accelerator, devices and
    cluster environment are settled. Decides ``"auto"`` (``"ddp"`` for more than one device) and
    substitutions (``"dp"`` on CPU becomes ``"ddp"``).

    Args:
        requested: The lower-cased string the user passed.
        context: The accelerator, device type, number of devices and nodes, and cluster environment.

    Returns:
        A catalog name or :class:`~fabric_core.plugin_api.Spec`, or ``None`` to leave the decision to others. The
        core's fallback turns ``"auto"`` with one device into ``"single_device"`` and otherwise returns
        ``requested`` unchanged.
    """


@hookspec(firstresult=True)
def fabric_core_select_precision(requested: str, context: SelectionContext) -> str | Spec | None:
    """Map a normalised precision string to the precision entry that serves it under the strategy.

    Called once per ``Fabric(...)`` whose ``precision`` is not an instance, after the strategy is chosen
    (``context.strategy_class`` is its class). Strategies that bring their own precision class (FSDP,
    DeepSpeed, XLA) answer here.

    Args:
        requested: The precision in canonical form (``"bf16-mixed"``, ``"32-true"``, ``"nf4"``, ...).
        context: Everything chosen so far, including ``strategy_class``.

    Returns:
        A catalog name or :class:`~fabric_core.plugin_api.Spec`, or ``None``. The core's fallback returns
        ``requested`` unchanged (``"16-mixed"`` on CPU becomes ``"bf16-mixed"`` with a warning).
    """


@hookspec
def fabric_core_validate_selection(context: SelectionContext) -> None:
    """Reject a combination that cannot run.

    Called once per ``Fabric(...)`` with the complete selection, before any component is built. Every
    implementation runs.

    Args:
        context: The complete selection.

    Raises:
        InvalidConfigError: With a message naming the values at fault and what would work instead.
    """
