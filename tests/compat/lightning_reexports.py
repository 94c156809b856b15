"""Which module-level names Lightning Fabric re-exports from another of its modules: the table behind
``fabric_core._lightning_names``.

Lightning's modules import many helpers from each other (``strategies/fsdp.py`` has
``from lightning_fabric.utilities.load import _lazy_load``), and real code imports them from either place. Our
Lightning-path modules answer those names through one table instead of repeating each import. This script reads
the installed ``lightning_fabric`` (its sources, so an ``import ... as`` keeps its original name) and prints the
table; ``--write`` rewrites ``fabric_core/_lightning_names.py``. ``tests/compat/test_api_surface.py`` fails when
the table and Lightning disagree.
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
TABLE = Path(__file__).resolve().parents[2] / "fabric_core" / "_lightning_names.py"
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


def render(data: dict[str, dict[str, str]]) -> str:
    import lightning_fabric

    lines = [
        '"""Lightning Fabric\'s names that one of its modules re-exports from another, at our matching paths.',
        "",
        f"Generated from lightning-fabric {lightning_fabric.__version__} by",
        "``python tests/compat/lightning_reexports.py --write``; do not edit by hand.",
        "``{our module: {name: source}}``, where the source is ``module`` (same name) or ``module:name``.",
        ":func:`fabric_core._deferred.lightning_reexports` serves them as module attributes on first access.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final",
        "",
        "# fmt: off",
        "REEXPORTS: Final[dict[str, dict[str, str]]] = {",
    ]
    for module, names in data.items():
        lines.append(f"    {module!r}: {{")
        lines += [f"        {name!r}: {source!r}," for name, source in names.items()]
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
