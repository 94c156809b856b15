"""Which module-level names Lightning Fabric re-exports from another of its modules: the table behind
``fabric_core._lightning.paths.reexported_names``.

Lightning's modules import many helpers from each other (``strategies/fsdp.py`` has
``from lightning_fabric.utilities.load import _lazy_load``), and real code imports them from either place. Our
Lightning-path modules answer those names through one table instead of repeating each import. This script reads
the installed ``lightning_fabric`` (its sources, so an ``import ... as`` keeps its original name) and prints the
table; ``--write`` rewrites ``fabric_core/_lightning/paths/reexported_names.py``.
``tests/compat/test_api_surface.py`` fails when the table and Lightning disagree.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

LIGHTNING = "lightning_fabric"
OURS = "fabric_core"
TABLE = Path(__file__).resolve().parents[2] / "fabric_core" / "_lightning" / "paths" / "reexported_names.py"
# Lightning modules whose names we do not serve: its packaging and its setup script.
SKIPPED = {f"{LIGHTNING}.__about__", f"{LIGHTNING}.__setup__", f"{LIGHTNING}.__version__"}


def ours(path: str) -> str:
    return OURS + path[len(LIGHTNING) :]


def lightning_modules() -> list[str]:
    pkg = importlib.import_module(LIGHTNING)
    names = [LIGHTNING]
    names += [i.name for i in pkgutil.walk_packages(pkg.__path__, LIGHTNING + ".", onerror=lambda _name: None)]
    return sorted(n for n in names if n not in SKIPPED)


def imported_from_lightning(module_path: str) -> dict[str, str]:
    """``{name: "source.module" or "source.module:original_name"}`` for the module's imports from Lightning.

    Only module-level imports count (an import inside a function is not a name of the module); imports under
    ``if TYPE_CHECKING:`` are left out, since the name does not exist at run time.
    """
    module = importlib.import_module(module_path)
    tree = ast.parse(inspect.getsource(module))
    found: dict[str, str] = {}
    for node in _module_level(tree.body):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module != LIGHTNING and not node.module.startswith(LIGHTNING + "."):
            continue
        for alias in node.names:
            name = alias.asname or alias.name
            if alias.name == "*" or name not in vars(module):
                continue
            source = ours(node.module)
            found[name] = source if alias.asname in (None, alias.name) else f"{source}:{alias.name}"
    return found


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements run at import: the body, plus the branches of ``if``/``try`` (not ``if TYPE_CHECKING``)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                continue
            out += _module_level(node.body) + _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _module_level(node.body)
            for handler in node.handlers:
                out += _module_level(handler.body)
            out += _module_level(node.orelse) + _module_level(node.finalbody)
        else:
            out.append(node)
    return out


def table() -> dict[str, dict[str, str]]:
    """The re-exports of every Lightning module, keyed by our module path."""
    result: dict[str, dict[str, str]] = {}
    for path in lightning_modules():
        names = imported_from_lightning(path)
        if names:
            result[ours(path)] = dict(sorted(names.items()))
    return result


def _relative(path: str) -> str:
    return path.removeprefix(OURS).lstrip(".")


def render(data: dict[str, dict[str, str]]) -> str:
    """The table as Python: per module, each source module with the names taken from it (``name=original``)."""
    import textwrap

    import lightning_fabric

    lines = [
        '"""Lightning Fabric\'s names that one of its modules re-exports from another, at our matching paths.',
        "",
        f"Generated from lightning-fabric {lightning_fabric.__version__} by",
        "``python tests/compat/lightning_reexports.py --write``; do not edit by hand.",
        '``{our module: {source module: names}}``, paths relative to ``fabric_core`` (``""`` is the package): the',
        "space-separated names are taken from the source module;",
        "``name=original`` where Lightning imports under another name. :func:`reexported` gives one module's",
        "``{name: source}``; :func:`fabric_core._deferred.lightning_reexports` serves them on first access.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import functools",
        "from typing import Final",
        "",
        "# fmt: off",
        "_SOURCES: Final[dict[str, dict[str, str]]] = {",
    ]
    for module, names in data.items():
        by_source: dict[str, list[str]] = {}
        for name, source in names.items():
            source_module, _, original = source.partition(":")
            by_source.setdefault(_relative(source_module), []).append(f"{name}={original}" if original else name)
        lines.append(f"    {_relative(module)!r}: {{")
        for source_module, taken in by_source.items():
            width = 120 - len(f"        {source_module!r}: '',")
            chunks = textwrap.wrap(" ".join(taken), width=width, break_on_hyphens=False)
            if len(chunks) == 1:
                lines.append(f"        {source_module!r}: {chunks[0]!r},")
            else:
                lines.append(f"        {source_module!r}: (")
                lines += [f"            {chunk + ' '!r}" for chunk in chunks[:-1]]
                lines += [f"            {chunks[-1]!r}", "        ),"]
        lines.append("    },")
    lines += [
        "}",
        "# fmt: on",
        "",
        "",
        "@functools.cache",
        "def reexported(module: str) -> dict[str, str]:",
        '    """``{name: source}`` for ``module`` (source: ``module`` or ``module:original``); empty if none."""',
        "    found: dict[str, str] = {}",
        '    for source, names in _SOURCES.get(module.removeprefix("fabric_core").lstrip("."), {}).items():',
        '        path = f"fabric_core.{source}" if source else "fabric_core"',
        "        for entry in names.split():",
        '            name, _, original = entry.partition("=")',
        '            found[name] = f"{path}:{original}" if original else path',
        "    return found",
        "",
        "",
        "#: Every module that re-exports something, with its names: ``{module: {name: source}}``.",
        'REEXPORTS: Final = {path: reexported(path) for path in (f"fabric_core.{m}".rstrip(".") for m in _SOURCES)}',
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render(table())
    if "--write" in sys.argv[1:]:
        TABLE.write_text(text)
        print(f"wrote {TABLE}")
    else:
        print(text)
