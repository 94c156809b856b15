"""The plugin contract: everything a fabric-core plugin imports, and nothing that imports torch.

A *plugin* (an entry-point plugin) is a distribution that names a module in the entry-point group
``fabric_core.plugins``. That module holds functions decorated with :data:`hookimpl` whose names are the hooks
below. It imports from this module only (and, in the classes it registers, from public fabric-core modules
such as ``fabric_core.strategies``)::

    from fabric_core.plugin_api import Registry, SelectionContext, hookimpl

    @hookimpl
    def fabric_core_register_strategies(registry: Registry) -> None:
        registry.add("my_strategy", "my_plugin.strategy:MyStrategy", description="...")

A registration that only adds names needs no function of its own: :func:`registers` and
:func:`module_paths` make the hook implementation from what it registers::

    from fabric_core.plugin_api import component, module_paths, registers

    fabric_core_register_strategies = registers(
        component("my_strategy", "my_plugin.strategy:MyStrategy", description="..."),
    )
    fabric_core_register_modules = module_paths({"strategies.my_strategy": "my_plugin.strategy"})

Importing this module imports neither torch nor any plugin, so a registration module that imports only it
stays light: it is imported for every ``Fabric(...)`` and every ``fabric-core list-plugins``. A plugin's
package stays as light with :func:`lazy_exports`, which loads its classes on first access::

    __getattr__, __dir__ = lazy_exports(__name__, {"MyStrategy": "my_plugin.strategy"})

The hooks (:data:`HOOKS`; each is documented in :mod:`fabric_core.hookspecs`) come in three families:

* **Registration** (``fabric_core_register_*``): called once per plugin manager. Each receives a
  :class:`Registry` for one of the :data:`KINDS` and records ``"module:Class"`` strings with
  :meth:`Registry.add`; ``fabric_core_register_modules`` receives a :class:`ModuleRegistry`.
* **Selection** (``fabric_core_select_*``): called while ``Fabric(...)`` decides its components. Each maps
  what the user asked for to a catalog name or a :class:`Spec`, given a :class:`SelectionContext`; ``None``
  leaves the decision to others. The first answer wins and becomes a :class:`Decision` that
  ``fabric-core explain`` shows with the plugin and hook that made it.
* **Validation** (``fabric_core_validate_selection``): every implementation sees the final
  :class:`SelectionContext` and raises :class:`InvalidConfigError` to reject a combination.

How hooks are called. The plugin manager does not use pluggy's own caller for the selection hooks (declared
``firstresult``) nor for validation: it walks the implementations itself, in pluggy's order (``tryfirst``
first, the core's ``trylast`` fallback last), and calls them one at a time. That is deliberate: an
implementation that raises anything but a :class:`FabricCoreError` (a deliberate rejection), or that answers
something other than a name, a ``spec(...)`` or ``None``, marks *its* plugin failed, is named in a warning,
and is skipped, so one broken plugin cannot break ``Fabric(...)`` for the others; and the answer comes back
with the name of the plugin that gave it, which the recorded decision needs. What that gives up: hook
wrappers (``wrapper=True``/``hookwrapper=True`` implementations are refused when the plugin loads, as
nothing would run them), pluggy's call tracing and monitoring (``add_hookcall_monitoring``,
``enable_tracing``) around these calls, and pluggy's compiled call loop (selection runs once per
``Fabric(...)``, so the loop in Python costs nothing that matters). Registration hooks are called the same
way, one plugin at a time, so a registration that raises fails its plugin only.

Errors a plugin raises: :class:`InvalidConfigError` (a bad combination or option; also a ``ValueError``),
:class:`ArgumentTypeError` (a value of the wrong type; also a ``TypeError``), :class:`MissingPackageError`
(a choice whose package is not installed; also a ``ModuleNotFoundError``),
:class:`AcceleratorUnavailableError` and :class:`EnvironmentSetupError` (also ``RuntimeError``\\ s). All
derive from :class:`FabricCoreError`; warnings derive from :class:`FabricCoreWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, final

from fabric_core import hookspecs
from fabric_core._deferred import lazy_exports
from fabric_core._kernel.context import Decision, SelectionContext
from fabric_core._kernel.registry import (
    KIND_ATTRIBUTE,
    KINDS,
    Catalog,
    Entry,
    ModuleDeclaration,
    ModuleRegistry,
    Registry,
    Spec,
    component_kind,
    spec,
)
from fabric_core.errors import (
    AcceleratorUnavailableError,
    AmbiguousNameError,
    ArgumentTypeError,
    EnvironmentSetupError,
    FabricCoreError,
    FabricCoreWarning,
    InvalidConfigError,
    MissingPackageError,
    PluginWarning,
    PossibleUserWarning,
    UnknownNameError,
    UnknownOptionError,
)
from fabric_core.hookspecs import PROJECT, hookimpl

__all__ = [
    "HOOKS",
    "KINDS",
    "KIND_ATTRIBUTE",
    "PROJECT",
    "AcceleratorUnavailableError",
    "AmbiguousNameError",
    "ArgumentTypeError",
    "Catalog",
    "Component",
    "Decision",
    "Entry",
    "EnvironmentSetupError",
    "FabricCoreError",
    "FabricCoreWarning",
    "InvalidConfigError",
    "MissingPackageError",
    "ModuleDeclaration",
    "ModuleRegistry",
    "PluginWarning",
    "PossibleUserWarning",
    "Registry",
    "SelectionContext",
    "Spec",
    "UnknownNameError",
    "UnknownOptionError",
    "bf16_on_cpu",
    "component",
    "component_kind",
    "hookimpl",
    "hookspecs",
    "lazy_exports",
    "module_paths",
    "registers",
    "spec",
]

#: The name of every hook a plugin may implement, in the order :mod:`fabric_core.hookspecs` declares them.
HOOKS: Final = tuple(name for name in vars(hookspecs) if name.startswith(f"{PROJECT}_"))


@final
@dataclass(frozen=True)
class Component:
    """One ``registry.add(name, target, **options)``, declared before there is a registry (see :func:`registers`).

    Attributes:
        name: The component name.
        target: ``"module:Class"``, imported only when the name is chosen.
        options: :meth:`Registry.add`'s keyword arguments (``description=``, ``defaults=``, ``priority=``, ...).
    """

    name: str
    target: str
    options: Mapping[str, Any]


def component(name: str, target: str, /, **options: Any) -> Component:
    """A component for :func:`registers`: the arguments :meth:`Registry.add` takes, kept until the hook runs.

    A keyword :meth:`Registry.add` does not take fails the plugin when the hook runs, as it would in a
    ``registry.add(...)`` call.
    """
    return Component(name, target, MappingProxyType(options))


def registers(*components: Component) -> Callable[[Registry], None]:
    """A registration hook implementation that adds ``components``: assign it to the hook's name.

    The result is a function marked with :data:`hookimpl`, so the plugin manager finds it at module level as it
    finds a decorated ``def``; a registration that computes what it adds is written as such a ``def``.
    """

    def register(registry: Registry) -> None:
        for each in components:
            registry.add(each.name, each.target, **each.options)

    return hookimpl(register)


def module_paths(modules: Mapping[str, str]) -> Callable[[ModuleRegistry], None]:
    """A ``fabric_core_register_modules`` implementation that declares each ``{path: module}`` of ``modules``.

    Each item is one :meth:`ModuleRegistry.add`: ``import fabric_core.<path>`` gives the plugin's ``module``.
    """

    def register(registry: ModuleRegistry) -> None:
        for path, module in modules.items():
            registry.add(path, module)

    return hookimpl(register)


def bf16_on_cpu(requested: str, context: SelectionContext) -> str:
    """``requested``, except ``"16-mixed"`` on a CPU: ``"bf16-mixed"``, with Lightning's warning.

    Lightning makes this choice once, whatever the strategy: each ``fabric_core_select_precision``
    implementation that serves ``"16-mixed"`` asks here first, so every strategy answers and warns alike.
    """
    if requested != "16-mixed" or context.device_type != "cpu":
        return requested
    warnings.warn(
        # Lightning's sentence, then the strategy and why.
        "You passed `Fabric(accelerator='cpu', precision='16-mixed')` but AMP with fp16 is not supported on CPU. "
        f"Using `precision='bf16-mixed'` instead under strategy {context.strategy!r}: fp16 autocast on CPU is slow, "
        "and bf16 needs no gradient scaler.",
        FabricCoreWarning,
        stacklevel=3,
    )
    return "bf16-mixed"
