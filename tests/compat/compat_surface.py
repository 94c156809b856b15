"""Walk Lightning Fabric's public API and compare it, name by name and parameter by parameter, with ours.

Lightning's public surface is read from the installed ``lightning_fabric`` package:

- public modules: every module file of the package with no dotted path component starting with ``_``;
- public names of a module: its ``__all__`` where it has one, else its module-level names not starting with
  ``_``, leaving out modules and objects imported from outside ``lightning_fabric`` (``Any``, ``torch``,
  ``rank_zero_warn`` re-exported from lightning_utilities...): those are Lightning's imports, not its API;
- public members of a public class: attributes not starting with ``_`` that a ``lightning_fabric`` class in
  its MRO defines (methods, properties, class attributes), plus ``__init__``/``__call__``/``__enter__``...
  are compared through their parameters only;
- parameters: ``inspect.signature`` of every public function, method and class constructor; ``*args`` and
  ``**kwargs`` are compared by kind.

Each Lightning path ``lightning_fabric.X.Y`` is looked up as ``fabric_core.X.Y``; a module that does not
import under ``fabric_core`` makes each of its names missing.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LIGHTNING = "lightning_fabric"
OURS = "fabric_core"
# Dunder methods whose parameters are part of the API users call.
_COMPARED_DUNDERS = ("__init__", "__call__")
_MISSING = object()


def ours_path(path: str) -> str:
    """``lightning_fabric.X.Y`` -> ``fabric_core.X.Y``."""
    assert path == LIGHTNING or path.startswith(LIGHTNING + "."), path
    return OURS + path[len(LIGHTNING) :]


def public_modules() -> list[str]:
    """Every public module path of the installed lightning_fabric, the package itself first."""
    pkg = importlib.import_module(LIGHTNING)
    names = [LIGHTNING]
    for info in pkgutil.walk_packages(pkg.__path__, LIGHTNING + ".", onerror=lambda _name: None):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        names.append(info.name)
    return sorted(names)


def _from_lightning(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and (module == LIGHTNING or module.startswith(LIGHTNING + "."))


def public_names(module: types.ModuleType) -> list[str]:
    """The names a user may import from ``module`` (see the module docstring for the rule)."""
    declared = getattr(module, "__all__", None)
    if declared is not None:
        return sorted(str(name) for name in declared if not str(name).startswith("_"))
    is_package = hasattr(module, "__path__")
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_") or name == "TYPE_CHECKING" or isinstance(obj, types.ModuleType):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj):
            # A package re-exports its submodules' API; a plain module's own API is what it defines.
            own = obj.__module__ == module.__name__ or _wraps_utility(module, obj)
            if own or (is_package and _from_lightning(obj)):
                names.append(name)
        elif not _is_foreign_instance(obj):
            names.append(name)  # a public constant of the module (e.g. a registry, a flag)
    return sorted(names)


def _wraps_utility(module: types.ModuleType, obj: Any) -> bool:
    """``utilities.enums`` re-exporting ``lightning_utilities.core.enums``: the same-named sister module's API."""
    origin = str(getattr(obj, "__module__", ""))
    return origin.startswith("lightning_utilities.") and origin.rsplit(".", 1)[-1] == module.__name__.rsplit(".", 1)[-1]


def _is_foreign_instance(obj: Any) -> bool:
    """Module-level instances that are imports or plumbing rather than API (loggers, type variables)."""
    import logging
    import typing

    return isinstance(obj, logging.Logger | typing.TypeVar) or type(obj).__module__ in ("typing", "typing_extensions")


def public_members(cls: type) -> list[str]:
    """Public attributes a lightning_fabric class of ``cls``'s MRO defines."""
    names: set[str] = set()
    for base in cls.__mro__:
        if not _from_lightning(base):
            continue
        for name in vars(base):
            if not name.startswith("_"):
                names.add(name)
    if issubclass(cls, enum.Enum):
        names.update(cls.__members__)
    return sorted(names)


def signature_params(obj: Any) -> dict[str, inspect.Parameter] | None:
    """Parameters by name (``*args``/``**kwargs`` keyed by kind); None when there is no signature."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params: dict[str, inspect.Parameter] = {}
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            params["*args"] = p
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            params["**kwargs"] = p
        else:
            params[p.name] = p
    params.pop("self", None)
    params.pop("cls", None)
    return params


def _same_default(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if inspect.isfunction(a) and inspect.isfunction(b):
        return bool(a.__qualname__ == b.__qualname__)  # e.g. a private no-op default of the same name
    try:
        if bool(a == b):
            return True
    except Exception:  # tensors and odd objects compare by repr below
        pass
    return repr(a).replace(LIGHTNING, OURS) == repr(b)


@dataclass
class Report:
    """What our package lacks, keyed the way known_differences lists it."""

    modules: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # missing module-level names and class members
    params: list[str] = field(default_factory=list)  # "path(param)"
    defaults: dict[str, str] = field(default_factory=dict)  # "path(param)" -> "theirs != ours"
    # "path(param)" -> what ours takes at the position where Lightning takes `param` (a positional call differs)
    positions: dict[str, str] = field(default_factory=dict)
    compared_names: int = 0
    compared_params: int = 0


def _import(path: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(path)
    except ImportError:
        return None


def _lookup_static(owner: Any, name: str) -> Any:
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        pass
    try:
        return getattr(owner, name)
    except Exception:
        return _MISSING


def _member_callable(owner: type, name: str) -> Any:
    """The function behind a member (unwrapping static/class methods and properties), or None."""
    raw = _lookup_static(owner, name)
    if isinstance(raw, staticmethod | classmethod):
        return raw.__func__
    if isinstance(raw, property):
        return None
    if inspect.isfunction(raw) or inspect.ismethoddescriptor(raw):
        return raw
    return None


def compare() -> Report:
    """Compare Lightning's public surface with ours."""
    report = Report()
    seen: dict[int, tuple[str, Any]] = {}  # id(lightning object) -> (canonical path, our object)
    for mod_path in public_modules():
        theirs = importlib.import_module(mod_path)
        ours = _import(ours_path(mod_path))
        if ours is None:
            report.modules.append(mod_path)
        for name in public_names(theirs):
            path = f"{mod_path}.{name}"
            report.compared_names += 1
            their_obj = getattr(theirs, name)
            our_obj = _MISSING if ours is None else _lookup_static(ours, name)
            if our_obj is _MISSING:
                report.names.append(path)
            elif inspect.isclass(their_obj) or inspect.isfunction(their_obj):
                # Members and parameters once per Lightning object, at its first path we have.
                canonical = f"{their_obj.__module__}.{their_obj.__qualname__}" if _from_lightning(their_obj) else path
                seen.setdefault(id(their_obj), (canonical, their_obj, our_obj))
    for canonical, their_obj, our_obj in sorted(seen.values(), key=lambda entry: entry[0]):
        if inspect.isclass(their_obj):
            _compare_class(report, canonical, their_obj, our_obj)
        else:
            _compare_params(report, canonical, their_obj, our_obj)
    return report


def _compare_class(report: Report, path: str, theirs: type, ours: Any) -> None:
    if not inspect.isclass(ours):
        return  # a function or instance standing in for a class: compared by behaviour, not members
    for dunder in _COMPARED_DUNDERS:
        if any(_from_lightning(b) and dunder in vars(b) for b in theirs.__mro__):
            _compare_params(report, f"{path}.{dunder}", getattr(theirs, dunder), getattr(ours, dunder, None))
    for name in public_members(theirs):
        report.compared_names += 1
        member_path = f"{path}.{name}"
        if _lookup_static(ours, name) is _MISSING:
            report.names.append(member_path)
            continue
        their_fn = _member_callable(theirs, name)
        if their_fn is not None:
            _compare_params(report, member_path, their_fn, _member_callable(ours, name))


def _compare_params(report: Report, path: str, theirs: Any, ours: Any) -> None:
    their_params = signature_params(theirs)
    if not their_params:
        return
    our_params = signature_params(ours) if ours is not None else None
    if our_params is None:
        return  # no signature to read on our side (a builtin slot): nothing we can compare
    for name, param in their_params.items():
        report.compared_params += 1
        key = f"{path}({name})"
        if name not in our_params:
            report.params.append(key)
            continue
        default, our_default = param.default, our_params[name].default
        if not _same_default(default, our_default):
            report.defaults[key] = f"{_show(default)} != {_show(our_default)}"
    _compare_positions(report, path, their_params, our_params)


def _positional(params: dict[str, inspect.Parameter]) -> list[str]:
    """The names a call may pass by position, in order; ``"*args"`` last where there is one."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [name for name, p in params.items() if p.kind in kinds]
    return [*names, "*args"] if "*args" in params else names


def _compare_positions(
    report: Report, path: str, theirs: dict[str, inspect.Parameter], ours: dict[str, inspect.Parameter]
) -> None:
    """Record the first position where a positional call that Lightning binds one way binds another way here."""
    our_order = _positional(ours)
    for index, name in enumerate(_positional(theirs)):
        if name == "*args":
            return  # Lightning's catch-all: what ours takes there is ours to decide
        here = our_order[index] if index < len(our_order) else "*args" if our_order[-1:] == ["*args"] else None
        if here != name and here != "*args":
            report.positions[f"{path}({name})"] = f"position {index} is {here or 'not accepted'}"
            return


# Lightning's packaging modules: their names describe Lightning's distribution, not an API.
_PACKAGING_MODULES = ("__about__", "__setup__", "__version__")


def every_module() -> list[str]:
    """Every module of the installed lightning_fabric, private ones included, except its packaging modules."""
    pkg = importlib.import_module(LIGHTNING)
    names = [LIGHTNING]
    names += [i.name for i in pkgutil.walk_packages(pkg.__path__, LIGHTNING + ".", onerror=lambda _name: None)]
    return sorted(n for n in names if n.rsplit(".", 1)[-1] not in _PACKAGING_MODULES)


def module_level_names(module: types.ModuleType) -> list[str]:
    """Every name ``module`` defines at module level, or imports there from another Lightning module.

    Private names count (``_lazy_load``, ``_XLA_AVAILABLE``, ``_PRECISION_INPUT``): real code imports them. Left
    out: dunders, submodules, names imported from outside lightning_fabric (``Optional``, ``torch``, ``override``),
    ``TYPE_CHECKING`` and module loggers (``log = logging.getLogger(__name__)``), which are plumbing. Read from the
    module's source, so that ``from lightning_fabric.x import y`` counts and ``from torch import y`` does not.
    """
    import ast
    import logging

    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return []
    foreign: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            foreign.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and node.module
            and node.module != LIGHTNING
            and not node.module.startswith(LIGHTNING + ".")
        ):
            foreign.update(alias.asname or alias.name for alias in node.names)
    # Only names a module-level statement binds: a function that fills ``globals()`` when called (Lightning's
    # ``_import_bitsandbytes`` defines ``_NF4Linear`` and others so) would make the answer depend on what ran
    # before in this process.
    bound = _bound_at_module_level(tree.body)
    names = []
    for name, obj in vars(module).items():
        if name.startswith("__") or name in foreign or name == "TYPE_CHECKING" or name not in bound:
            continue
        if isinstance(obj, types.ModuleType | logging.Logger):
            continue
        names.append(name)
    return sorted(names)


def _bound_at_module_level(body: list[Any]) -> set[str]:
    """The names the statements of a module body bind, inside module-level ``if``/``try``/``with`` blocks too."""
    import ast

    bound: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.For):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            if isinstance(node, ast.For):
                bound |= _bound_at_module_level(node.body + node.orelse)
        elif isinstance(node, ast.If | ast.While):
            bound |= _bound_at_module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            handlers = [stmt for handler in node.handlers for stmt in handler.body]
            bound |= _bound_at_module_level(node.body + handlers + node.orelse + node.finalbody)
        elif isinstance(node, ast.With):
            bound |= _bound_at_module_level(node.body)
    return bound


def missing_module_level_names() -> tuple[list[str], int]:
    """``lightning_fabric.X.name`` for each module-level name our ``fabric_core.X`` lacks, and how many were looked at.

    A module that does not import under fabric_core makes each of its names missing.
    """
    import warnings

    missing: list[str] = []
    compared = 0
    for mod_path in every_module():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lightning's deprecated paths warn on import
            theirs = importlib.import_module(mod_path)
            ours = _import(ours_path(mod_path))
        for name in module_level_names(theirs):
            compared += 1
            if ours is None or _lookup_static(ours, name) is _MISSING:
                missing.append(f"{mod_path}.{name}")
    return missing, compared


def _show(value: Any) -> str:
    return "<required>" if value is inspect.Parameter.empty else repr(value)


def iter_summary(keys: list[str]) -> Iterator[str]:
    """Counts per module, most first: a readable overview of a long list."""
    counts: dict[str, int] = {}
    for key in keys:
        module = _module_of(key)
        counts[module] = counts.get(module, 0) + 1
    for module, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        yield f"{count:5d}  {module}"


def _module_of(key: str) -> str:
    parts = key.split("(")[0].split(".")
    # the longest prefix that is a module of lightning_fabric
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in _MODULES_CACHE or _is_module(candidate):
            return candidate
    return key


_MODULES_CACHE: set[str] = set()


def _is_module(path: str) -> bool:
    try:
        importlib.import_module(path)
    except ImportError:
        return False
    _MODULES_CACHE.add(path)
    return True


def prune(found: dict[str, list[str]]) -> list[str]:
    """Delete the allow-list lines of the surface sections whose difference is gone; return the deleted keys."""
    import known_differences as known

    stale = {key for section, keys in found.items() for key in getattr(known, section) if key not in keys}
    path = Path(known.__file__)
    kept = [line for line in path.read_text().splitlines(keepends=True) if _entry_key(line) not in stale]
    path.write_text("".join(kept))
    return sorted(stale)


def _entry_key(line: str) -> str | None:
    stripped = line.strip()
    if not stripped.startswith('"') or '": (' not in stripped:
        return None
    return stripped[1 : stripped.index('": (')]


def main() -> None:
    """``python tests/compat/compat_surface.py [--prune]``: the figures for a closing note (found, allow-listed,
    by kind); ``--prune`` first deletes the allow-list entries of the surface sections that no longer differ."""
    import known_differences as known

    report = compare()
    found = {
        "MODULES": report.modules,
        "NAMES": report.names,
        "PARAMS": report.params,
        "DEFAULTS": list(report.defaults),
    }
    if "--prune" in sys.argv[1:]:
        for key in prune(found):
            print(f"deleted stale entry {key}")
        importlib.reload(known)
    print(f"compared: {report.compared_names} public names and members, {report.compared_params} parameters")
    for section, keys in found.items():
        listed: dict[str, tuple[str, str]] = getattr(known, section)
        kinds = [listed[key][0] for key in keys if key in listed]
        print(
            f"{section.lower():9s} differing {len(keys):4d}  outside the allow-list {len(keys) - len(kinds):3d}"
            f"  gap {kinds.count(known.GAP):4d}  deliberate {kinds.count(known.DELIBERATE):3d}"
        )


if __name__ == "__main__":
    main()
