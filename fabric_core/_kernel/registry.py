"""Names to lazy targets: what plugins register, and how a name is looked up.

A plugin's registration hook receives a :class:`Registry` for one kind of component and calls
:meth:`Registry.add`. Everything registered ends up in one immutable :class:`Catalog`. A target is a
``"module:attribute"`` string that is imported only when its name is resolved.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, final

from fabric_core.errors import (
    AmbiguousNameError,
    InvalidConfigError,
    PluginImportError,
    UnknownNameError,
    UnknownOptionError,
    describe_failure,
)

__all__ = [
    "KINDS",
    "KIND_ATTRIBUTE",
    "Catalog",
    "Entry",
    "ModuleDeclaration",
    "ModuleRegistry",
    "Registry",
    "Spec",
    "component_kind",
    "in_code_entry",
    "instance_kind",
    "spec",
]

KINDS: Final = ("accelerator", "strategy", "precision", "environment", "logger", "callback", "runner")
#: The class attribute through which a component's base class says what kind of component its subclasses are
#: (``"accelerator"``, ``"strategy"``, ``"precision"``, ``"environment"``, ``"checkpoint_io"``): how the kernel
#: recognises an instance passed to ``Fabric(...)`` without importing the base classes above it.
KIND_ATTRIBUTE: Final = "__fabric_core_kind__"


def component_kind(obj: object) -> str | None:
    """The kind that ``obj`` (an instance or a class) declares through :data:`KIND_ATTRIBUTE`; ``None`` if none."""
    cls = obj if isinstance(obj, type) else type(obj)
    kind = getattr(cls, KIND_ATTRIBUTE, None)
    return kind if isinstance(kind, str) else None


def instance_kind(obj: object) -> str | None:
    """The kind of the component ``obj`` when it is an instance (a class passed to ``Fabric(...)`` is no component)."""
    return None if isinstance(obj, type) else component_kind(obj)
_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_MODULE_PATH = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def import_target(target: str) -> Any:
    """Import ``"package.module:Attribute"`` and return the attribute."""
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@final
@dataclass(frozen=True)
class Spec:
    """A component chosen by name, with options: ``spec("deepspeed", stage=3)``.

    Attributes:
        name: The component name, optionally qualified as ``"plugin:name"``.
        options: Keyword arguments for the component's constructor; they win over the entry's defaults.
    """

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"spec({self.name!r}{opts})"


def spec(name: str, /, **options: Any) -> Spec:
    """Name a component and its options, e.g. ``Fabric(strategy=spec("ddp", static_graph=True))``."""
    if not isinstance(name, str) or not name:
        raise InvalidConfigError(f"`spec(name, ...)` needs a component name, got {name!r}.", value=name)
    return Spec(name, options)


@final
@dataclass(frozen=True, eq=False)
class Entry:
    """One registered component.

    Attributes:
        kind: One of :data:`KINDS`.
        name: The lower-case name users pass.
        target: ``"module:Class"``; imported only when the entry is built.
        description: One line for ``fabric-core list-plugins``.
        plugin: The name of the plugin that registered it.
        defaults: Constructor keyword arguments this name implies (``stage=3`` for ``deepspeed_stage_3``).
        aliases: Other names that select this entry.
        priority: Order for "auto" detection: higher is tried first.
        probe: ``"module:function"`` returning whether the component can run here; never raises.
        requires: Requirement strings (``"deepspeed>=0.14"``) checked before the target is imported.
    """

    kind: str
    name: str
    target: str
    description: str
    plugin: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    priority: int = 0
    probe: str | None = None
    requires: tuple[str, ...] = ()
    _loaded: Any = field(default=None, init=False, repr=False)
    _probe_fn: Any = field(default=None, init=False, repr=False)

    @property
    def qualified_name(self) -> str:
        return f"{self.plugin}:{self.name}"

    @property
    def class_name(self) -> str:
        return self.target.rpartition(":")[2].rpartition(".")[2]

    def missing_requirements(self) -> list[str]:
        """Return the requirements of this entry that the installed distributions do not satisfy."""
        from fabric_core._kernel.metadata import unmet_requirements

        return unmet_requirements(self.requires)

    def load(self) -> Any:
        """Import and return the target, after checking ``requires``.

        Raises:
            PluginImportError: A requirement is missing or the import failed.
        """
        if self._loaded is not None:
            return self._loaded
        missing = self.missing_requirements()
        if missing:
            raise PluginImportError(
                self.plugin,
                f"the {self.kind} {self.name!r} needs {', '.join(missing)}. "
                f"Run `pip install {' '.join(repr(m) for m in missing)}`.",
            )
        try:
            loaded = import_target(self.target)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a target module that calls sys.exit() must not end the program
            why = f"{exc!r}" if not isinstance(exc, SystemExit) else describe_failure(exc, "at import")
            raise PluginImportError(
                self.plugin, f"the {self.kind} {self.name!r} failed to import {self.target!r}: {why}"
            ) from exc
        # Entries live as long as their catalog (one per manager): a warm Fabric(...) imports nothing.
        object.__setattr__(self, "_loaded", loaded)
        return loaded

    def build(self, options: Mapping[str, Any] | None = None) -> Any:
        """Build the component: the target called with ``defaults`` updated by ``options``.

        Raises:
            UnknownOptionError: An option the target's signature does not take (a target that takes
                ``**kwargs`` checks them itself).
        """
        factory = self.load()
        kwargs = {**self.defaults, **(options or {})}
        from fabric_core._signature import accepted_keywords

        accepted = accepted_keywords(factory)
        unknown = sorted(set(kwargs) - accepted) if accepted is not None else []
        if accepted is not None and unknown:
            given = {k: v for k, v in kwargs.items() if k not in self.defaults or k in (options or {})}
            call = repr(Spec(self.name, given))
            raise UnknownOptionError(
                call, unknown[0], accepted, owner=f"the {self.kind} {self.class_name}", value=kwargs[unknown[0]]
            )
        return factory(**kwargs)

    def is_available(self) -> bool:
        """Run the probe (``True`` when there is none). A probe that raises counts as unavailable."""
        if self.probe is None:
            return True
        try:
            if self._probe_fn is None:
                object.__setattr__(self, "_probe_fn", import_target(self.probe))
            return bool(self._probe_fn())
        except KeyboardInterrupt:
            raise
        except BaseException:  # sys.exit() in a probe too: a probe never ends the program
            return False


class Registry:
    """What a registration hook receives: :meth:`add` records one component of one kind."""

    def __init__(self, kind: str, plugin: str) -> None:
        if kind not in KINDS:
            raise InvalidConfigError(f"Unknown component kind {kind!r}; valid kinds: {', '.join(KINDS)}.")
        self.kind: Final = kind
        self.plugin: Final = plugin
        self.entries: list[Entry] = []
        self.overrides: set[str] = set()

    def add(
        self,
        name: str,
        target: str,
        *,
        description: str,
        defaults: Mapping[str, Any] | None = None,
        aliases: Iterable[str] = (),
        priority: int = 0,
        probe: str | None = None,
        requires: Iterable[str] = (),
        override: bool = False,
    ) -> Entry:
        """Register ``name`` for ``target``.

        Args:
            name: Lower-case name: letters, digits, ``-`` and ``_``.
            target: ``"module:Class"`` (or any callable), imported only when the name is chosen.
            description: One line shown by ``fabric-core list-plugins``.
            defaults: Constructor keyword arguments this name implies.
            aliases: Other names for the same entry.
            priority: Order for "auto" detection (higher first).
            probe: ``"module:function"`` returning a bool: can this run here?
            requires: Requirement strings checked before the target is imported.
            override: Replace a built-in entry of the same name instead of being ambiguous with it.

        Raises:
            InvalidConfigError: A malformed name or target.
        """
        names = (name, *aliases)
        for n in names:
            if not isinstance(n, str) or not _NAME.match(n):
                raise InvalidConfigError(
                    f"Plugin {self.plugin!r} registered the {self.kind} name {n!r}: names are lower-case "
                    "letters, digits, '-' and '_'.",
                    value=n,
                )
        for s in (target, probe):
            if s is not None and not _TARGET.match(s):
                raise InvalidConfigError(
                    f"Plugin {self.plugin!r} registered {name!r} with {s!r}: expected 'module:attribute'.",
                    value=s,
                )
        entry = Entry(
            kind=self.kind,
            name=name,
            target=target,
            description=description,
            plugin=self.plugin,
            defaults=MappingProxyType(dict(defaults or {})),
            aliases=tuple(aliases),
            priority=priority,
            probe=probe,
            requires=tuple(requires),
        )
        self.entries.append(entry)
        if override:
            self.overrides.add(name)
        return entry


def in_code_entry(
    kind: str, name: str, obj: Any, *, description: str, defaults: Mapping[str, Any], plugin: str
) -> Entry:
    """An entry for ``obj``, registered by code while it runs: it holds the object, nothing is imported.

    Its target names where the object was defined (``"__main__:MyAccelerator"``), for display only. It has
    priority -1, below the built-in cpu accelerator, so ``accelerator="auto"`` never picks it (as Lightning's
    "auto" never picks a registered class); an object with ``is_available()`` is asked that as its probe.

    Raises:
        InvalidConfigError: ``name`` is not letters, digits, ``-`` and ``_``, or ``obj`` is not callable.
    """
    if not isinstance(name, str) or not _NAME.match(name.lower()):
        raise InvalidConfigError(
            f"Cannot register the {kind} {name!r}: names are letters, digits, '-' and '_' (case is ignored).",
            value=name,
        )
    if not callable(obj):
        raise InvalidConfigError(
            f"Cannot register the {kind} {name!r}: expected a class or factory to build it with, got {obj!r}.",
            value=obj,
        )
    where = f"{getattr(obj, '__module__', None) or '?'}:{getattr(obj, '__qualname__', type(obj).__name__)}"
    available = getattr(obj, "is_available", None)
    entry = Entry(
        kind=kind,
        name=name.lower(),
        target=where,
        description=description,
        plugin=plugin,
        defaults=MappingProxyType(dict(defaults)),
        priority=-1,
        probe=f"{where}.is_available" if callable(available) else None,
    )
    object.__setattr__(entry, "_loaded", obj)
    object.__setattr__(entry, "_probe_fn", available if callable(available) else None)
    return entry


@final
@dataclass(frozen=True)
class ModuleDeclaration:
    """One compatibility module a plugin provides: ``fabric_core.<path>`` is the plugin's ``module``.

    Attributes:
        path: The path under ``fabric_core`` (``"strategies.ddp"``), Lightning's module path.
        module: The plugin's module that is imported under that path (``"fabric_core_ddp.ddp"``).
        plugin: The name of the plugin that declared it.
    """

    path: str
    module: str
    plugin: str


class ModuleRegistry:
    """What :func:`~fabric_core.hookspecs.fabric_core_register_modules` receives: :meth:`add` declares a path."""

    def __init__(self, plugin: str) -> None:
        self.plugin: Final = plugin
        self.declarations: list[ModuleDeclaration] = []

    def add(self, path: str, module: str) -> ModuleDeclaration:
        """Declare that ``import fabric_core.<path>`` gives the plugin's ``module`` (the same module object).

        Args:
            path: Dotted path under ``fabric_core``, without the ``fabric_core.`` prefix (``"strategies.ddp"``);
                lower-case letters, digits and ``_``. A module the core itself has at that path wins.
            module: The plugin's module, as ``import`` spells it (``"fabric_core_ddp.ddp"``). Nothing is
                imported now: it is imported when the path is.

        Raises:
            InvalidConfigError: A malformed path or module name.
        """
        if not isinstance(path, str) or not _MODULE_PATH.match(path) or path.startswith("fabric_core."):
            raise InvalidConfigError(
                f"Plugin {self.plugin!r} declared the module path {path!r}: expected a dotted path under "
                "fabric_core without its prefix, e.g. 'strategies.ddp'.",
                value=path,
            )
        if not isinstance(module, str) or not _MODULE.match(module):
            raise InvalidConfigError(
                f"Plugin {self.plugin!r} declared {path!r} as {module!r}: expected a module name such as "
                "'my_plugin.strategy'.",
                value=module,
            )
        declaration = ModuleDeclaration(path, module, self.plugin)
        self.declarations.append(declaration)
        return declaration


class Catalog:
    """Every registered entry, immutable once built, looked up by name, alias or ``"plugin:name"``.

    A name registered by a plugin and by the built-ins stays the built-in's unless the plugin registered
    it with ``override=True``; the entry that loses is still reachable by its qualified name and is listed
    in :attr:`shadowed`. A name registered by two plugins is ambiguous: looking it up raises, unless one of
    them registered it with ``override=True`` (as code registering at run time does to replace a name).
    """

    def __init__(
        self,
        entries: Iterable[Entry],
        overrides: Iterable[tuple[str, str, str]] = (),
        *,
        plugin_aliases: Mapping[str, tuple[str, ...]] | None = None,
        unavailable: Mapping[str, str] | None = None,
        modules: Iterable[ModuleDeclaration] = (),
    ) -> None:
        """Build the catalog.

        Args:
            entries: All entries, in registration order.
            overrides: ``(kind, name, plugin)`` triples: that plugin's entry replaces the built-in one.
            plugin_aliases: Other names of plugins in qualified names: ``{"fabric-core-ddp": ("ddp",)}``
                (a distribution's name), or one name two plugins share (then it selects neither alone).
            unavailable: Why installed plugins are not loaded, by plugin and distribution name; an unknown
                name that one of them would provide says so instead of suggesting an install.
            modules: The compatibility modules plugins declared (``fabric_core.<path>`` import paths).
        """
        self._overrides: Final = tuple(overrides)
        self._declarations: Final = tuple(modules)
        self._plugin_aliases: Final = MappingProxyType(dict(plugin_aliases or {}))
        self.unavailable: Final[Mapping[str, str]] = MappingProxyType(dict(unavailable or {}))
        self._entries: tuple[Entry, ...] = tuple(entries)
        overriding = set(self._overrides)
        self._qualified: dict[tuple[str, str, str], Entry] = {}
        grouped: dict[tuple[str, str], list[Entry]] = {}
        for entry in self._entries:
            for n in (entry.name, *entry.aliases):
                self._qualified.setdefault((entry.kind, entry.plugin, n), entry)
                grouped.setdefault((entry.kind, n), []).append(entry)
        self._index: dict[tuple[str, str], tuple[Entry, ...]] = {}
        shadowed: list[Entry] = []
        for (kind, n), group in grouped.items():
            builtin = [e for e in group if e.plugin == "builtin"]
            others = [e for e in group if e.plugin != "builtin"]
            winners = [e for e in others if (kind, e.name, e.plugin) in overriding]
            if winners and len(winners) < len(group):
                shadowed.extend(e for e in group if e not in winners)
                group = winners
            elif builtin and others:
                shadowed.extend(others)
                group = builtin
            self._index[(kind, n)] = tuple(dict.fromkeys(group))
        self.shadowed: Final[tuple[Entry, ...]] = tuple(dict.fromkeys(shadowed))
        declared: dict[str, list[ModuleDeclaration]] = {}
        for d in self._declarations:
            declared.setdefault(d.path, []).append(d)
        #: ``{path under fabric_core: every declaration of it}``; more than one distinct module is ambiguous.
        self.modules: Final[Mapping[str, tuple[ModuleDeclaration, ...]]] = MappingProxyType(
            {p: tuple(ds) for p, ds in declared.items()}
        )

    def extended(self, entries: Iterable[Entry], overrides: Iterable[tuple[str, str, str]] = ()) -> Catalog:
        """A new catalog: this one's entries and ``entries`` after them, with ``overrides`` added."""
        return Catalog(
            [*self._entries, *entries],
            [*self._overrides, *overrides],
            plugin_aliases=self._plugin_aliases,
            unavailable=self.unavailable,
            modules=self._declarations,
        )

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, kind: str | None = None) -> list[Entry]:
        """Every entry of one kind (all kinds if ``None``), in registration order."""
        return [e for e in self._entries if kind is None or e.kind == kind]

    def selectable(self, kind: str) -> list[Entry]:
        """Entries an unqualified name can select: all of ``kind`` but the shadowed ones (for "auto")."""
        shadowed = {id(e) for e in self.shadowed}
        return [e for e in self.entries(kind) if id(e) not in shadowed]

    def names(self, kind: str) -> list[str]:
        """Every unqualified name and alias of ``kind`` that :meth:`get` accepts, sorted."""
        return sorted(n for k, n in self._index if k == kind)

    def find(self, kind: str, name: str) -> Entry | None:
        """Like :meth:`get` but return ``None`` for an unknown name (ambiguity still raises)."""
        key = name.strip().lower()
        plugin, sep, short = key.rpartition(":")
        if sep:
            plugins = dict.fromkeys((plugin, *self._plugin_aliases.get(plugin, ())))
            found = [e for p in plugins if (e := self._qualified.get((kind, p, short))) is not None]
            if len(found) > 1:
                raise AmbiguousNameError(kind, short, [e.plugin for e in found])
            return found[0] if found else None
        candidates = self._index.get((kind, short), ())
        if len(candidates) > 1:
            raise AmbiguousNameError(kind, short, [e.plugin for e in candidates])
        return candidates[0] if candidates else None

    def get(self, kind: str, name: str, *, argument: str | None = None) -> Entry:
        """Return the one entry that ``name`` selects.

        Args:
            kind: The kind of component.
            name: A name, an alias or ``"plugin:name"``; case and surrounding spaces are ignored.
            argument: How the user passed it, for the error message (``"Fabric(strategy=...)"``).

        Raises:
            UnknownNameError: No entry has that name.
            AmbiguousNameError: More than one plugin provides it.
        """
        entry = self.find(kind, name)
        if entry is None:
            raise UnknownNameError(kind, name, self.names(kind), argument=argument, unavailable=self.unavailable)
        return entry

    def by_class_name(self, class_name: str) -> list[Entry]:
        """Entries whose target's class is called ``class_name`` (for Lightning-style import paths)."""
        return [e for e in self._entries if e.class_name == class_name]
