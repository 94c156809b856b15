"""The names of Lightning's modules whose classes come from a plugin: the table behind
``fabric_core._lightning.paths.absent_names``.

When the plugin behind a Lightning path (``accelerators.cuda`` from ``fabric-core-cuda``) is not installed, the
path still imports and holds Lightning's names, so that ``lightning.pytorch`` and user code that only mention
them keep working (:mod:`fabric_core._lightning.paths.absent_plugins`). This script reads those modules of the installed
``lightning_fabric`` (their sources, so that only what a module defines itself counts; what it imports from its
other modules is in ``fabric_core._lightning.paths.reexported_names``) and prints the table; ``--write`` rewrites
``fabric_core/_lightning/paths/absent_names.py``. ``tests/compat/test_api_surface.py`` fails when the table and
Lightning disagree.

Each name is described by a short string:

- ``class BASE [BASE ...]``: a class; each base is the nearest class the core itself has (``module:Name``,
  relative to ``fabric_core``), found by walking up Lightning's own bases past the classes of other plugins;
- ``function``: a function;
- ``absent``: an availability flag (Lightning's ``RequirementCache``), false when the plugin is absent;
- ``value REPR``: a plain constant (``_METADATA_FILENAME = "meta.pt"``);
- ``literal A B ...``: a ``typing.Literal`` of strings (``_PRECISION_INPUT``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import typing
from pathlib import Path

LIGHTNING = "lightning_fabric"
TABLE = Path(__file__).resolve().parents[2] / "fabric_core" / "_lightning" / "paths" / "absent_names.py"


def _paths() -> dict[str, str]:
    from fabric_core.errors import FIRST_PARTY_MODULES

    return dict(FIRST_PARTY_MODULES)


def _core_has(path: str, name: str) -> bool:
    """Whether the core (not a plugin) defines ``fabric_core.<path>.<name>``."""
    if path in _paths():
        return False
    try:
        module = importlib.import_module(f"fabric_core.{path}" if path else "fabric_core")
        value = getattr(module, name)
    except (ImportError, AttributeError):
        return False
    return inspect.isclass(value) and getattr(value, "__module__", "").startswith("fabric_core.")


def _bases(cls: type) -> list[str]:
    """The nearest classes the core has, up Lightning's bases of ``cls``."""
    found: list[str] = []
    for base in cls.__bases__:
        module = base.__module__
        if module == LIGHTNING or module.startswith(LIGHTNING + "."):
            path = module[len(LIGHTNING) :].lstrip(".")
            if _core_has(path, base.__name__):
                found.append(f"{path}:{base.__name__}")
            else:
                found += _bases(base)
        elif base is not object:
            found.append(f"{module}:{base.__name__}")  # outside Lightning (contextlib.AbstractContextManager)
    unique: list[str] = []
    for base in found:
        if base not in unique:
            unique.append(base)
    return unique


def _defined_names(module: object) -> dict[str, bool]:
    """Names the module's source binds at module level itself, each with whether a ``def`` binds it."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    names: dict[str, bool] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names[node.name] = isinstance(node, ast.FunctionDef)
        elif isinstance(node, ast.Assign):
            names.update(dict.fromkeys((t.id for t in node.targets if isinstance(t, ast.Name)), False))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = False
    return names


def _describe(module: object, name: str, defined_by_def: bool) -> str | None:
    value = getattr(module, name)
    if inspect.isclass(value) and value.__module__ == getattr(module, "__name__", None):
        return " ".join(["class", *_bases(value)])
    if defined_by_def or inspect.isfunction(value):
        return "function"  # decorated ones too (``functools.lru_cache``)
    if type(value).__name__ in ("RequirementCache", "ModuleAvailableCache"):
        return "absent"
    if typing.get_origin(value) is typing.Literal and all(isinstance(a, str) for a in typing.get_args(value)):
        return " ".join(["literal", *typing.get_args(value)])
    if isinstance(value, (str, int, float, bool, tuple, type(None))):
        try:
            ast.literal_eval(repr(value))
        except (ValueError, SyntaxError):
            return None
        return f"value {value!r}"
    return None  # loggers, type variables, torch objects: nothing a user imports


def table() -> dict[str, dict[str, str]]:
    """``{path: {name: description}}`` for every Lightning path a first-party plugin provides."""
    result: dict[str, dict[str, str]] = {}
    for path in _paths():
        module = importlib.import_module(f"{LIGHTNING}.{path}")
        names: dict[str, str] = {}
        for name, defined_by_def in _defined_names(module).items():
            if name.startswith("__") or not hasattr(module, name):
                continue
            description = _describe(module, name, defined_by_def)
            if description is not None:
                names[name] = description
        result[path] = names
    return result


def render(data: dict[str, dict[str, str]]) -> str:
    import lightning_fabric

    lines = [
        '"""The names of Lightning\'s modules whose classes come from a first-party plugin, for when it is absent.',
        "",
        f"Generated from lightning-fabric {lightning_fabric.__version__} by",
        "``python tests/compat/lightning_absent.py --write``; do not edit by hand. ``{path: {name: description}}``;",
        "the descriptions are explained in that script, and :mod:`.absent_plugins` builds the modules.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final",
        "",
        "# fmt: off",
        "ABSENT_NAMES: Final[dict[str, dict[str, str]]] = {",
    ]
    for path, names in data.items():
        lines.append(f"    {path!r}: {{")
        lines += [f"        {name!r}: {description!r}," for name, description in names.items()]
        lines.append("    },")
    lines += ["}", "# fmt: on", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render(table())
    if "--write" in sys.argv[1:]:
        TABLE.write_text(text)
        print(f"wrote {TABLE}")
    else:
        print(text)
