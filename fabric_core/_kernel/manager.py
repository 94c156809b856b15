"""Plugin discovery, isolated loading, switches, records, and the typed facade over the hooks.

Nothing outside this module touches pluggy: the rest of fabric-core calls :class:`PluginManager` methods.
Hooks are called one implementation at a time (registration in :meth:`PluginManager._build_catalog`,
selection in :meth:`PluginManager._call_first`, validation in :meth:`PluginManager.validate_selection`),
never through pluggy's own caller, so that a broken plugin is named and skipped instead of failing every
``Fabric(...)``; :mod:`fabric_core.plugin_api` says what that gives up.
"""

from __future__ import annotations

import difflib
import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal, final

import pluggy

from fabric_core import hookspecs
from fabric_core._kernel.metadata import core_requirement_problem, dist_key, entry_points, read_facts
from fabric_core._kernel.registry import Catalog, Entry, ModuleDeclaration, ModuleRegistry, Registry, Spec
from fabric_core._logging import log_event
from fabric_core._switches import env_flag
from fabric_core.errors import (
    FabricCoreError,
    IncompatiblePluginError,
    PluginImportError,
    PluginLoadError,
    PluginWarning,
    describe_failure,
)

if TYPE_CHECKING:
    from fabric_core._kernel.context import SelectionContext

__all__ = ["ENTRY_POINT_GROUP", "IN_CODE", "PluginManager", "PluginRecord", "get_manager"]

ENTRY_POINT_GROUP: Final = "fabric_core.plugins"
BUILTIN: Final = "builtin"
#: The distribution whose entry point named :data:`BUILTIN` is the core's own plugin.
CORE_DISTRIBUTION: Final = "fabric-core"
#: The plugin name of components registered in code while the program runs (:meth:`PluginManager.add_in_code`).
IN_CODE: Final = "in-code"
Status = Literal["loaded", "failed", "blocked", "incompatible", "conflict"]
_REGISTER_HOOKS: Final = {
    "accelerator": "fabric_core_register_accelerators",
    "strategy": "fabric_core_register_strategies",
    "precision": "fabric_core_register_precisions",
    "environment": "fabric_core_register_environments",
    "logger": "fabric_core_register_loggers",
    "callback": "fabric_core_register_callbacks",
    "runner": "fabric_core_register_runners",
}


@final
@dataclass(frozen=True)
class PluginRecord:
    """What happened to one plugin.

    Attributes:
        name: The entry-point name (the plugin's short name), or the distribution's name when another
            distribution declares the same entry-point name.
        status: ``loaded``, ``failed``, ``blocked``, ``incompatible`` or ``conflict``.
        distribution: The distribution that declares it (``None`` for objects registered in code).
        version: That distribution's version.
        module: The registration module (``"fabric_core_ddp._plugin"``).
        reason: Why it is not loaded, for every status but ``loaded``.
    """

    name: str
    status: Status
    distribution: str | None = None
    version: str | None = None
    module: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "name": self.name,
            "status": self.status,
            "distribution": self.distribution,
            "version": self.version,
            "module": self.module,
            "reason": self.reason,
        }


def _env_names(environ: Mapping[str, str], name: str) -> frozenset[str] | None:
    raw = environ.get(name)
    if raw is None:
        return None
    return frozenset(n.strip().lower() for n in raw.replace(";", ",").split(",") if n.strip())


def _env_allow_list(environ: Mapping[str, str]) -> frozenset[str] | None:
    """Read ``FABRIC_CORE_PLUGINS``; a blank value counts as unset.

    ``FABRIC_CORE_PLUGINS=$LIST`` with an empty ``$LIST`` is how a blank value usually arrives: reading it
    as "allow nothing" silently drops every plugin, and "no plugins" has its own switch.
    """
    names = _env_names(environ, "FABRIC_CORE_PLUGINS")
    if names is not None and not names:
        warnings.warn(
            f"FABRIC_CORE_PLUGINS={environ['FABRIC_CORE_PLUGINS']!r} is empty and is ignored: every installed "
            "plugin may load. To load none, set FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD=1.",
            PluginWarning,
            stacklevel=4,
        )
        return None
    return names


def _with_dist_keys(names: frozenset[str]) -> frozenset[str]:
    """Switch names as written plus their normalized forms, so ``my_dist`` also matches ``my-dist``."""
    return names | {dist_key(n) for n in names}


def _closest_hook(name: str) -> str:
    known = [n for n in dir(hookspecs) if n.startswith("fabric_core_")]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else f" (valid hooks: {', '.join(sorted(known))})"


def _short_repr(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _expected_answer(value: object) -> bool:
    return value is None or isinstance(value, Spec) or (isinstance(value, str) and bool(value.strip()))


def _is_core_plugin(ep: metadata.EntryPoint) -> bool:
    dist = ep.dist
    return ep.name.lower() == BUILTIN and dist is not None and dist_key(dist.name) == dist_key(CORE_DISTRIBUTION)


def _core_plugin(declared: list[metadata.EntryPoint]) -> metadata.EntryPoint:
    """The core's own plugin (the built-in components): found, like any plugin, through its entry point.

    fabric-core's distribution declares it as ``builtin`` in :data:`ENTRY_POINT_GROUP`, so the kernel names no
    module of the components above it. It is loaded first by every manager, whatever the switches say.

    Args:
        declared: The entry points of :data:`ENTRY_POINT_GROUP`.

    Raises:
        PluginLoadError: fabric-core's distribution is not installed (a source tree on ``sys.path`` only).
    """
    for ep in declared:
        if _is_core_plugin(ep):
            return ep
    raise PluginLoadError(
        BUILTIN,
        f"fabric-core's own plugin was not found: the {CORE_DISTRIBUTION!r} distribution declares it as the entry "
        f"point {BUILTIN!r} of {ENTRY_POINT_GROUP!r}, and no installed distribution does. Install fabric-core "
        "(`pip install -e .` in a clone), not only put its folder on sys.path.",
    )


class PluginManager:
    """Discovers plugins once, loads each in isolation, and answers the hooks through typed methods.

    Every argument left as ``None`` is read from the environment:

    Args:
        autoload: Load entry-point plugins (``FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD`` turns this off).
        allow: Only these entry-point plugins may load (``FABRIC_CORE_PLUGINS``, comma-separated).
        block: These never load; blocking wins over allowing (``FABRIC_CORE_BLOCK_PLUGINS``). The built-in
            plugin cannot be blocked.
        strict: Problems raise instead of being recorded and warned about (``FABRIC_CORE_STRICT_PLUGINS``).
        plugins: ``{name: module_or_object}`` registered in code, in addition to entry points (and even
            when autoload is off).
        group: The entry-point group to scan.
        environ: Where to read the switches (``os.environ``).
    """

    def __init__(
        self,
        *,
        autoload: bool | None = None,
        allow: Iterable[str] | None = None,
        block: Iterable[str] | None = None,
        strict: bool | None = None,
        plugins: Mapping[str, object] | None = None,
        group: str = ENTRY_POINT_GROUP,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.autoload: Final = (
            autoload if autoload is not None else not env_flag(env, "FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD", False)
        )
        self.allow: Final = frozenset(a.lower() for a in allow) if allow is not None else _env_allow_list(env)
        blocked = (
            frozenset(b.lower() for b in block) if block is not None else _env_names(env, "FABRIC_CORE_BLOCK_PLUGINS")
        )
        self.block: Final = blocked or frozenset()
        self.strict: Final = strict if strict is not None else env_flag(env, "FABRIC_CORE_STRICT_PLUGINS", False)
        self.group: Final = group
        self._extra: dict[str, object] = dict(plugins or {})
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._records: dict[str, PluginRecord] = {}
        self._conflicts: list[PluginRecord] = []
        self._aliases: dict[str, list[str]] = {}  # other names of a plugin: its distribution, a shared name
        self._seen: set[str] = set()  # every name a switch may use for an installed plugin
        self._catalog: Catalog | None = None
        self._discovered: Catalog | None = None  # what the plugins registered; _catalog adds what code did
        self._in_code: dict[tuple[str, str], Entry] = {}
        self._lock = threading.Lock()

    # -- discovery -------------------------------------------------------------------------------------
    @property
    def records(self) -> list[PluginRecord]:
        """One record per plugin seen (discovering plugins first if needed), built-in first."""
        self.catalog  # noqa: B018 - discovery and registration happen on first access
        return [*self._records.values(), *self._conflicts]

    @property
    def catalog(self) -> Catalog:
        """The catalog of every registered component, built once per manager."""
        if self._catalog is None:
            with self._lock:
                if self._discovered is None:
                    self._load_all()
                    self._discovered = self._build_catalog()
                if self._catalog is None:
                    overrides = [(e.kind, e.name, e.plugin) for e in self._in_code.values()]
                    self._catalog = self._discovered.extended(self._in_code.values(), overrides)
        return self._catalog

    # -- components registered in code at run time ---------------------------------------------------------
    def add_in_code(self, entry: Entry) -> None:
        """Add ``entry`` to this process's catalog, beside what plugins registered; it takes its name.

        For code that registers a component while it runs (Lightning's ``ACCELERATOR_REGISTRY.register``);
        the entry's plugin is :data:`IN_CODE`. Registering the same kind and name again replaces it.
        """
        self.catalog  # noqa: B018 - discover the plugins first, so that the entry comes after theirs
        with self._lock:
            self._in_code[(entry.kind, entry.name)] = entry
            self._catalog = None
        log_event("component_registered_in_code", kind=entry.kind, name=entry.name, target=entry.target)

    def remove_in_code(self, kind: str, name: str) -> bool:
        """Forget the component ``name`` registered in code; whether there was one."""
        with self._lock:
            removed = self._in_code.pop((kind, name), None) is not None
            self._catalog = None if removed else self._catalog
        return removed

    def _load_all(self) -> None:
        eps = entry_points(self.group) if self.autoload or self.group == ENTRY_POINT_GROUP else []
        core = _core_plugin(eps if self.group == ENTRY_POINT_GROUP else entry_points(ENTRY_POINT_GROUP))
        self._register(BUILTIN, core.load(), PluginRecord(BUILTIN, "loaded", module=core.value))
        for name, obj in self._extra.items():
            module = getattr(obj, "__name__", type(obj).__name__)
            self._consider(name.lower(), _constant(obj), PluginRecord(name.lower(), "loaded", module=module))
        if self.autoload:
            counts = Counter(ep.name.lower() for ep in eps if not _is_core_plugin(ep))
            for ep in eps:
                if not _is_core_plugin(ep):
                    self._consider_entry_point(ep, shared=counts[ep.name.lower()] > 1)
            for name, count in counts.items():
                if count > 1 and name not in self._records:
                    self._warn_shared(name)
        if self.allow is not None:
            known = self._seen | set(self._records)
            for missing in sorted(a for a in self.allow if a not in known and dist_key(a) not in known):
                self._problem(PluginRecord(missing, "blocked", reason="named in FABRIC_CORE_PLUGINS but not installed"))

    def _consider_entry_point(self, ep: metadata.EntryPoint, shared: bool) -> None:
        """Consider one entry point; ``shared``: another distribution declares the same name.

        A shared name cannot tell the two apart, so each of them is registered under its distribution's
        name (``"fabric-core-ddp"``) and the shared name becomes an alias of both.
        """
        facts = read_facts(ep.dist)
        distribution = facts.name
        name = ep.name.lower()
        key = (dist_key(distribution) if distribution else ep.value) if shared and name != BUILTIN else name
        names = {name, key} | ({dist_key(distribution)} if distribution else set())
        self._seen |= names
        for alias in names - {key}:
            self._aliases.setdefault(alias, []).append(key)
        record = PluginRecord(
            key,
            "loaded",
            distribution=distribution,
            version=facts.version,
            module=ep.value,
        )
        self._consider(key, ep.load, record, check=lambda: core_requirement_problem(facts.requires), names=names)

    def _warn_shared(self, name: str) -> None:
        keys = sorted(k for k in self._aliases.get(name, []) if k in self._records)
        if sum(self._records[k].status == "loaded" for k in keys) < 2:
            return  # at most one of them loads (the others are blocked or failed): nothing to tell apart
        dists = sorted(self._records[k].distribution or k for k in keys)
        log_event("plugin_name_shared", level="warning", plugin=name, distributions=dists)
        warnings.warn(
            f"fabric-core plugin name {name!r} is declared by more than one distribution: {', '.join(dists)}. "
            f"Each is known by its distribution's name instead: select a component as "
            f"{' or '.join(repr(k + ':NAME') for k in keys)}, and block one with "
            "FABRIC_CORE_BLOCK_PLUGINS=<distribution>.",
            PluginWarning,
            stacklevel=4,
        )

    def _consider(
        self,
        name: str,
        load: Callable[[], object],
        record: PluginRecord,
        check: Callable[[], str | None] | None = None,
        names: Iterable[str] = (),
    ) -> None:
        switch_names = {name, *names}
        if name in self._records:
            first = self._records[name]
            reason = (
                f"the plugin name {name!r} is already taken by {first.distribution or first.module!r}; "
                f"{record.distribution or record.module!r} was not loaded"
            )
            self._problem(self._with(record, "conflict", reason))
            return
        # `builtin` is registered first, so it is never blocked: it is a conflict above
        if switch_names & _with_dist_keys(self.block):
            self._records[name] = self._with(record, "blocked", "blocked by FABRIC_CORE_BLOCK_PLUGINS")
            log_event("plugin_blocked", plugin=name, reason="blocked")
            return
        if self.allow is not None and not switch_names & _with_dist_keys(self.allow):
            self._records[name] = self._with(record, "blocked", "not listed in FABRIC_CORE_PLUGINS")
            log_event("plugin_blocked", plugin=name, reason="not allowed")
            return
        problem = check() if check is not None else None
        if problem is not None:
            self._problem(self._with(record, "incompatible", problem), IncompatiblePluginError)
            return
        try:
            obj = load()
        except KeyboardInterrupt:  # the user stopping the program, not the plugin failing
            raise
        except BaseException as exc:  # SystemExit too: a plugin must not end the user's program
            self._problem(self._with(record, "failed", describe_failure(exc, "at import")), PluginImportError)
            return
        self._register(name, obj, record)

    def _register(self, name: str, obj: object, record: PluginRecord) -> None:
        try:
            self._pm.register(obj, name=name)
        except Exception as exc:
            self._problem(self._with(record, "failed", f"invalid plugin: {exc}"))
            return
        # pluggy accepts an implementation of a hook no spec declares (a typo registers nothing): check
        # this plugin's hooks only, so that one plugin's typo does not fail the others.
        unknown = sorted(
            c.name
            for c in self._pm.get_hookcallers(obj) or ()
            if not c.has_spec() and any(i.plugin is obj and not i.optionalhook for i in c.get_hookimpls())
        )  # `optionalhook=True` declares a hook that may not exist (a newer core's), as pluggy reads it
        # The facade calls implementations one by one: a wrapper would hand back a generator, not an answer.
        wrappers = sorted(
            c.name
            for c in self._pm.get_hookcallers(obj) or ()
            if any(i.plugin is obj and (i.wrapper or i.hookwrapper) for i in c.get_hookimpls())
        )
        if unknown or wrappers:
            self._pm.unregister(obj, name=name)
            reasons = [f"unknown hook {u}{_closest_hook(u)}" for u in unknown]
            reasons += [f"{w} is a hook wrapper; fabric-core hooks take plain implementations" for w in wrappers]
            reason = "; ".join(reasons)
            self._problem(self._with(record, "failed", reason))
            return
        self._records[name] = record
        log_event("plugin_loaded", plugin=name, distribution=record.distribution, version=record.version)

    @staticmethod
    def _with(record: PluginRecord, status: Status, reason: str) -> PluginRecord:
        return PluginRecord(record.name, status, record.distribution, record.version, record.module, reason)

    def _problem(self, record: PluginRecord, error: type[PluginLoadError] = PluginLoadError) -> None:
        """Record a plugin that cannot be used, then raise (strict) or warn once."""
        if record.status == "conflict":
            self._conflicts.append(record)
        else:
            self._records[record.name] = record
        log_event(f"plugin_{record.status}", level="warning", plugin=record.name, reason=record.reason)
        if self.strict:
            raise error(record.name, record.reason or record.status, distribution=record.distribution)
        where = f" (distribution {record.distribution!r})" if record.distribution else ""
        warnings.warn(
            f"fabric-core plugin {record.name!r}{where} is {record.status}: {record.reason}. "
            "Everything else keeps working; `fabric-core list-plugins --all` shows every plugin.",
            PluginWarning,
            stacklevel=4,
        )

    def _build_catalog(self) -> Catalog:
        entries: list[Entry] = []
        overrides: list[tuple[str, str, str]] = []
        for kind, hook_name in _REGISTER_HOOKS.items():
            hook = getattr(self._pm.hook, hook_name)
            for impl in reversed(hook.get_hookimpls()):
                if self._pm.get_plugin(impl.plugin_name) is None:
                    continue  # unregistered after an earlier failure
                registry = Registry(kind, impl.plugin_name)
                try:
                    impl.function(registry)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    self._fail_loaded(impl.plugin_name, describe_failure(exc, hook_name))
                    entries = [e for e in entries if e.plugin != impl.plugin_name]
                    overrides = [o for o in overrides if o[2] != impl.plugin_name]
                    continue
                entries.extend(registry.entries)
                overrides.extend((kind, name, impl.plugin_name) for name in registry.overrides)
        modules = self._declared_modules()
        failed = {n for n, r in self._records.items() if r.status != "loaded"}
        catalog = Catalog(
            [e for e in entries if e.plugin not in failed],
            [o for o in overrides if o[2] not in failed],
            plugin_aliases={a: tuple(k) for a, k in self._aliases.items()},
            unavailable=self._unavailable(),
            modules=modules,
        )
        for entry in catalog.shadowed:
            if entry.plugin != BUILTIN:
                warnings.warn(
                    f"fabric-core plugin {entry.plugin!r} registers the {entry.kind} {entry.name!r}, which is "
                    f"built in; the built-in one is used. Select the plugin's with "
                    f"'{entry.qualified_name}', or register it with `override=True`.",
                    PluginWarning,
                    stacklevel=3,
                )
        log_event("catalog_built", entries=len(catalog), plugins=sorted(self._records))
        return catalog

    def _declared_modules(self) -> list[ModuleDeclaration]:
        """Call every plugin's ``fabric_core_register_modules``; a plugin whose hook raises is marked failed."""
        declared: list[ModuleDeclaration] = []
        for impl in reversed(self._pm.hook.fabric_core_register_modules.get_hookimpls()):
            if self._pm.get_plugin(impl.plugin_name) is None:
                continue
            registry = ModuleRegistry(impl.plugin_name)
            try:
                impl.function(registry)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self._fail_loaded(impl.plugin_name, describe_failure(exc, "fabric_core_register_modules"))
                continue
            declared.extend(registry.declarations)
        return declared

    def _unavailable(self) -> dict[str, str]:
        """Why each installed plugin that is not loaded is not, keyed by plugin and distribution name."""
        why: dict[str, str] = {}
        for r in [*self._records.values(), *self._conflicts]:
            if r.status == "loaded" or not (r.distribution or r.module):
                continue  # loaded, or named in an allow-list but not installed at all
            state = r.reason if r.status == "blocked" else f"{r.status} ({r.reason})"
            where = f" ({r.distribution})" if r.distribution and dist_key(r.distribution) != r.name else ""
            text = f"The plugin {r.name!r}{where} is installed but {state}."
            why.setdefault(r.name, text)
            if r.distribution:
                why.setdefault(dist_key(r.distribution), text)
        return why

    def _fail_loaded(self, name: str, reason: str) -> None:
        """Turn a loaded plugin into a failed one: unregister it so none of its hooks run again."""
        if name == BUILTIN:
            raise FabricCoreError(f"The built-in plugin is broken: {reason}")
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self._pm.unregister(plugin, name=name)
        record = self._records.get(name, PluginRecord(name, "loaded"))
        self._problem(self._with(record, "failed", reason))

    # -- the typed facade over selection hooks ----------------------------------------------------------
    def _call_first(self, hook_name: str, **kwargs: Any) -> tuple[Any, str | None]:
        """Call implementations in pluggy's order until one answers; return the answer and who gave it.

        Deliberately not pluggy's ``firstresult`` caller: implementations are called one by one so that a
        plugin whose hook raises anything but a :class:`FabricCoreError` (a deliberate rejection), or answers
        something other than a name, a ``spec(...)`` or ``None``, is named, marked failed and skipped, and one
        broken plugin cannot break selection for the others; and so that the answer comes back with the
        plugin that gave it, for the recorded decision. What this gives up: hook wrappers (refused at
        registration, see :meth:`_register`), pluggy's tracing and call monitoring around the call, and its
        compiled call loop (selection runs once per ``Fabric(...)``).
        """
        self.catalog  # noqa: B018 - make sure plugins are loaded
        for impl in reversed(getattr(self._pm.hook, hook_name).get_hookimpls()):
            try:
                result = impl.function(*(kwargs[a] for a in impl.argnames))
            except FabricCoreError:
                raise
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self._fail_loaded(impl.plugin_name, describe_failure(exc, hook_name))
                continue
            if not _expected_answer(result):
                # Checked here, at the facade: past this point the core may rely on a name or a Spec.
                self._fail_loaded(
                    impl.plugin_name,
                    f"{hook_name} returned {_short_repr(result)} ({type(result).__name__}); expected a "
                    "component name (str), a spec(...) or None",
                )
                continue
            if result is not None:
                return result, impl.plugin_name
        return None, None

    def select_accelerator(self, requested: str, context: SelectionContext) -> tuple[str | Spec, str | None]:
        """Ask the hooks which entry serves ``accelerator=requested``; returns (answer, plugin)."""
        answer, plugin = self._call_first("fabric_core_select_accelerator", requested=requested, context=context)
        return (answer if answer is not None else requested), plugin

    def select_strategy(self, requested: str, context: SelectionContext) -> tuple[str | Spec, str | None]:
        """Ask the hooks which entry serves ``strategy=requested``; returns (answer, plugin)."""
        answer, plugin = self._call_first("fabric_core_select_strategy", requested=requested, context=context)
        return (answer if answer is not None else requested), plugin

    def select_precision(self, requested: str, context: SelectionContext) -> tuple[str | Spec, str | None]:
        """Ask the hooks which entry serves ``precision=requested``; returns (answer, plugin)."""
        answer, plugin = self._call_first("fabric_core_select_precision", requested=requested, context=context)
        return (answer if answer is not None else requested), plugin

    def validate_selection(self, context: SelectionContext) -> None:
        """Run every validation hook; the first rejection raises."""
        self.catalog  # noqa: B018 - make sure plugins are loaded
        for impl in reversed(self._pm.hook.fabric_core_validate_selection.get_hookimpls()):
            try:
                impl.function(context)
            except FabricCoreError:
                raise
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self._fail_loaded(impl.plugin_name, describe_failure(exc, "fabric_core_validate_selection"))


def _constant(obj: object) -> Callable[[], object]:
    return lambda: obj


_default: PluginManager | None = None
_default_lock = threading.Lock()


def get_manager() -> PluginManager:
    """The process-wide manager ``Fabric(...)`` uses when none is passed, created on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = PluginManager()
    return _default


def plugin_module(name: str, hooks: Mapping[str, Callable[..., Any]]) -> ModuleType:
    """Make a module-like plugin object from hook functions (for tests and code-registered plugins)."""
    module = ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(module, hook_name, hookspecs.hookimpl(fn))
    return module
