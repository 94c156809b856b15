"""The public plugin contract: torch-free, the only fabric-core import of registration modules, no circles."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fabric_core
from fabric_core import plugin_api

ROOT = Path(fabric_core.__file__).resolve().parent.parent
REGISTRATION_MODULES = sorted(
    [
        *ROOT.glob("plugins/*/fabric_core_*/_plugin.py"),
        *ROOT.glob("examples/*/fabric_core_*/_plugin.py"),
    ]
)
#: The kernel: discovery, registration, the hooks, selection and building. None of them may be in a circle.
KERNEL = (
    "fabric_core._assembly",
    "fabric_core._builtin",
    "fabric_core._context",
    "fabric_core._manager",
    "fabric_core._registry",
    "fabric_core._selection",
    "fabric_core.hookspecs",
    "fabric_core.plugin_api",
)


@pytest.mark.timeout(60)
def test_the_contract_imports_neither_torch_nor_a_plugin() -> None:
    code = (
        "import sys; import fabric_core.plugin_api as api; "
        "assert api.Registry and api.SelectionContext and api.hookimpl; "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy') "
        "or m.startswith('fabric_core_')); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_contract_names_what_a_plugin_needs() -> None:
    from fabric_core import hookspecs

    assert set(plugin_api.HOOKS) == {n for n in dir(hookspecs) if n.startswith("fabric_core_")}
    assert len(plugin_api.HOOKS) == 12
    for name in ("Registry", "ModuleRegistry", "Entry", "Spec", "Catalog", "KINDS", "SelectionContext", "Decision"):
        assert name in plugin_api.__all__ and getattr(plugin_api, name) is not None
    for name in plugin_api.__all__:
        assert hasattr(plugin_api, name), name
    assert issubclass(plugin_api.InvalidConfigError, (plugin_api.FabricCoreError, ValueError))


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every module an import statement names, at module level, in functions and under TYPE_CHECKING."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from ((node.lineno, f"{node.module}.{a.name}") for a in node.names)


@pytest.mark.parametrize("path", REGISTRATION_MODULES, ids=lambda p: p.parent.name)
def test_registration_modules_import_only_the_public_contract(path: Path) -> None:
    private = [
        f"{path.name}:{line}: {name}"
        for line, name in _imports(path)
        if name.startswith("fabric_core.") and any(part.startswith("_") for part in name.split(".")[1:-1])
    ]
    assert not private, f"private fabric-core modules imported: {private}"
    assert any(name.startswith("fabric_core.plugin_api.") for _, name in _imports(path))


def test_there_are_registration_modules_to_check() -> None:
    assert len(REGISTRATION_MODULES) >= 10  # eight plugins, the template, the example


def _module_graph(package: Path) -> dict[str, set[str]]:
    """``{module: modules of the same tree it imports}``, counting function-level and type-only imports."""
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        targets = set()
        for target in found:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_circle_finder_finds_a_lazy_circle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.c import x\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import y\n")
    (package / "d.py").write_text("from . import a\n")
    assert _circles(_module_graph(package)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_kernel_module_is_in_an_import_circle() -> None:
    circles = _circles(_module_graph(ROOT / "fabric_core"))
    assert [c for c in circles if set(c) & set(KERNEL)] == []


@pytest.mark.parametrize("path", REGISTRATION_MODULES, ids=lambda p: p.parent.name)
def test_no_registration_module_is_in_an_import_circle(path: Path) -> None:
    package = path.parent
    circles = _circles(_module_graph(package))
    assert [c for c in circles if f"{package.name}._plugin" in c] == []
