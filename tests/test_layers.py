"""The shape of the code: no import circles, no module over 600 lines, and each layer imports only downwards.

Every module of ``fabric_core/`` and of each plugin package (``plugins/*/fabric_core_*/``) is parsed (nothing
is imported), and every import statement counts: at module level, inside functions (lazy imports) and under
``if TYPE_CHECKING:``. A lazy import still ties two modules together; it only hides the circle from Python.
Imports written as strings (catalog targets, ``reexports`` maps) are not statements and are not counted: that
indirection is how the kernel loads what it never names.

The layer rule is data (:data:`LAYERS`, :func:`layer_of`); ``CONTRIBUTING.md`` ("Layers") draws it.
"""

from __future__ import annotations

import ast
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
MAX_LINES: Final = 600

#: The layers, lowest first. A module may import modules of its own layer and of the layers below it.
LAYERS: Final = (
    "foundation",  # torch-free leaves every layer may use: errors, types, the signature and lazy-import helpers
    "kernel",  # the plugin host and its contract, torch-free: hookspecs, plugin_api, registry, manager, selection
    "utilities",  # fabric_core/utilities/: plain helpers (collections, ranks, seeds, data loaders, processes)
    "io",  # fabric_core/io/: checkpoint files and folders, atomic writes; never a strategy
    "components",  # accelerators/, precision/, environments/, launchers/, loggers/, callbacks/
    "distributed",  # fabric_core/_distributed/: the process group's runtime (rendezvous, collectives, diagnostics)
    "strategies",  # fabric_core/strategies/: they own and wire the components
    "api",  # Fabric and its wrappers, the CLI, Lightning's import paths (package facades, plugins/), testing/
    "plugins",  # the plugin distributions (plugins/*/fabric_core_*): they import only public fabric_core modules
)
#: Modules whose layer is not their folder's.
MODULE_LAYERS: Final[Mapping[str, str]] = {
    "fabric_core.errors": "foundation",
    "fabric_core._signature": "foundation",
    "fabric_core._deferred": "foundation",
    "fabric_core._lightning.paths.reexported_names": "foundation",
    "fabric_core._lightning.paths.absent_names": "foundation",
    "fabric_core._logging": "foundation",
    "fabric_core.utilities.types": "foundation",
    "fabric_core._version": "foundation",
    "fabric_core._switches": "foundation",
    # the core's own plugin: registers the built-in components as any plugin does (found by its entry point)
    "fabric_core._builtin": "components",
    **dict.fromkeys(("fabric_core.hookspecs", "fabric_core.plugin_api"), "kernel"),
    # Lightning's ``utilities`` paths that are conveniences over higher layers (checkpoint files, Fabric,
    # the strategy's collectives), not helpers those layers use.
    **dict.fromkeys(
        (
            "fabric_core.utilities._active",
            "fabric_core.utilities._process_group",
            "fabric_core.utilities.cloud_io",
            "fabric_core.utilities.consolidate_checkpoint",
            "fabric_core.utilities.operations",
            "fabric_core.utilities.spike",
            "fabric_core.utilities.throughput",
        ),
        "api",
    ),
}
#: The layer of each folder of ``fabric_core/``.
FOLDER_LAYERS: Final[Mapping[str, str]] = {
    "utilities": "utilities",
    "io": "io",
    **dict.fromkeys(("accelerators", "precision", "environments", "launchers", "loggers", "callbacks"), "components"),
    "strategies": "strategies",
    "plugins": "api",
    "testing": "api",
    "wrappers": "api",
    # the private packages (see PACKAGE_IMPORTS for the direction between them)
    "_kernel": "kernel",
    "_distributed": "distributed",
    "_fabric": "api",
    "_run": "api",
    "_lightning": "api",
}
#: What each private package may import of the others: the kernel and the distributed runtime import none of
#: them; the Fabric object's internals import the kernel and the runtime (its collectives record and check each
#: call); the Lightning layer imports only the kernel; the run command may also use the Lightning layer
#: (``fabric-core run`` serves zero-edit workers) and the runtime (the network choice, the rendezvous timeout).
#: An import between them not listed here is the wrong way.
PACKAGE_IMPORTS: Final[Mapping[str, frozenset[str]]] = {
    "_kernel": frozenset(),
    "_distributed": frozenset(),
    "_fabric": frozenset({"_kernel", "_distributed"}),
    "_lightning": frozenset({"_kernel"}),
    "_run": frozenset({"_kernel", "_lightning", "_distributed"}),
}
#: Top-level modules of ``fabric_core/`` in the api layer (what users and the command line call).
API_MODULES: Final = frozenset(
    {
        "fabric_core",
        "fabric_core.__main__",
        "fabric_core.fabric",
        "fabric_core.wrappers",
        "fabric_core.run_checkpoints",
        "fabric_core.connector",
        "fabric_core.cli",
        # zero-edit mode: Lightning's import names served by fabric_core's modules
        "fabric_core.compat",
        "fabric_core.lightning_imports",
    }
)
#: Layers whose modules must not import torch when imported: ``import fabric_core`` and the plugin contract
#: stay torch-free. Imports inside functions run only when a chosen component is built, so they do not count.
TORCH_FREE_LAYERS: Final = frozenset({"foundation", "kernel"})



@dataclass(frozen=True)
class Import:
    """One import statement's target, as the importer wrote it and as resolved to a known module."""

    importer: str
    target: str  # the module imported (a known module, or an outside one such as "torch.nn")
    line: int
    kind: str  # "module" (runs on import), "lazy" (inside a function) or "type" (under TYPE_CHECKING)

    def __str__(self) -> str:
        return f"{self.importer} -> {self.target} (line {self.line}, {self.kind})"


def _module_name(path: Path, base: Path) -> str:
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of fabric_core and of the plugin packages, by dotted name."""
    found = {_module_name(p, ROOT): p for p in sorted((ROOT / "fabric_core").rglob("*.py"))}
    for package in sorted(ROOT.glob("plugins/*/fabric_core_*")):
        found.update({_module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))})
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(name: str) -> str:
    """The known module ``name`` is, or is inside; outside names are returned as they are."""
    known = modules()
    candidate = name
    while candidate:
        if candidate in known:
            return candidate
        candidate = candidate.rpartition(".")[0]
    return name


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[Import] = []
        self._functions = 0
        self._type_checking = 0

    @property
    def _kind(self) -> str:
        return "type" if self._type_checking else "lazy" if self._functions else "module"

    def _add(self, target: str, line: int) -> None:
        resolved = _resolve(target)
        if resolved != self.module:
            self.found.append(Import(self.module, resolved, line, self._kind))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]
    visit_Lambda = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self._type_checking += 1
        for child in node.body:
            self.visit(child)
        self._type_checking -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split(".")
            base = parts[: len(parts) - (node.level - 1)]
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            # `from package import submodule` imports the submodule; `from module import name` the module.
            self._add(submodule if submodule in modules() else source, node.lineno)


@cache
def imports() -> tuple[Import, ...]:
    """Every import of every module (outside targets included)."""
    found: list[Import] = []
    for name, path in modules().items():
        collector = _Collector(name, path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        found.extend(collector.found)
    return tuple(dict.fromkeys(found))  # `from m import a, b` is one import of m


def graph() -> dict[str, dict[str, Import]]:
    """``{importer: {imported: the first such import}}`` between known modules."""
    edges: dict[str, dict[str, Import]] = defaultdict(dict)
    for item in imports():
        if item.target in modules():
            edges[item.importer].setdefault(item.target, item)
    return edges


def strongly_connected(edges: Mapping[str, Mapping[str, Import]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(modules()):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges.get(successor, {})))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def a_cycle(group: list[str], edges: Mapping[str, Mapping[str, Import]]) -> list[Import]:
    """The shortest cycle through the group's first module, as the imports that make it."""
    start, members = group[0], set(group)
    came_from: dict[str, Import] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor, item in sorted(edges.get(node, {}).items()):
            if successor not in members or successor in came_from:
                continue
            came_from[successor] = item
            if successor == start:
                cycle = [item]
                while cycle[0].importer != start:
                    cycle.insert(0, came_from[cycle[0].importer])
                return cycle
            queue.append(successor)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - a group always has one


def layer_of(module: str) -> str:
    """The layer of a known module (see :data:`LAYERS`)."""
    if not module.startswith("fabric_core.") and module != "fabric_core":
        return "plugins"
    if module in MODULE_LAYERS:
        return MODULE_LAYERS[module]
    folder = module.split(".")[1] if "." in module else ""
    if module in API_MODULES or (modules()[module].name == "__init__.py" and not folder.startswith("_")):
        return "api"  # a public package's __init__ is a Lightning import path: a facade over what is below
    if folder in FOLDER_LAYERS:
        return FOLDER_LAYERS[folder]
    raise AssertionError(f"{module} has no layer: add it to MODULE_LAYERS or API_MODULES in {__name__}")


def _rank(module: str) -> int:
    return LAYERS.index(layer_of(module))


def layer_violations(edges: Mapping[str, Mapping[str, Import]] | None = None) -> dict[tuple[str, str], Import]:
    return {
        (importer, target): item
        for importer, targets in (graph() if edges is None else edges).items()
        for target, item in targets.items()
        if _rank(target) > _rank(importer)
    }


def private_package(module: str) -> str | None:
    """The private package a module is in (a key of :data:`PACKAGE_IMPORTS`), if any."""
    parts = module.split(".")
    return parts[1] if parts[0] == "fabric_core" and len(parts) > 1 and parts[1] in PACKAGE_IMPORTS else None


def package_violations(edges: Mapping[str, Mapping[str, Import]] | None = None) -> list[Import]:
    """Imports from one private package into another that :data:`PACKAGE_IMPORTS` does not allow."""
    found = []
    for importer, targets in (graph() if edges is None else edges).items():
        source = private_package(importer)
        for target, item in targets.items():
            destination = private_package(target)
            if source and destination and source != destination and destination not in PACKAGE_IMPORTS[source]:
                found.append(item)
    return found


def private_imports() -> dict[str, list[Import]]:
    """``{private fabric_core module: the plugin imports of it}``."""
    found: dict[str, list[Import]] = defaultdict(list)
    for item in imports():
        target = item.target
        if (
            layer_of(item.importer) == "plugins"
            and target.split(".")[0] == "fabric_core"
            and any(part.startswith("_") and part != "__main__" for part in target.split("."))
        ):
            found[target].append(item)
    return found


def _runtime_closure(module: str) -> dict[str, list[str]]:
    """Modules (and outside packages) that importing ``module`` imports, each with the chain that gets there."""
    runtime: dict[str, list[str]] = defaultdict(list)
    for item in imports():
        if item.kind == "module":
            runtime[item.importer].append(item.target)
    for name in modules():  # importing a.b.c runs a/__init__ and a/b/__init__ first
        parts = name.split(".")
        runtime[name].extend(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules())
    chains = {module: [module]}
    queue = deque([module])
    while queue:
        node = queue.popleft()
        for target in runtime.get(node, []):
            if target not in chains:
                chains[target] = [*chains[node], target]
                if target in modules():
                    queue.append(target)
    return chains


def torch_at_import() -> dict[str, list[str]]:
    """``{torch-free-layer module: the chain of module-level imports that reaches torch}``."""
    found = {}
    for module in modules():
        if layer_of(module) in TORCH_FREE_LAYERS:
            chains = _runtime_closure(module)
            torch_chain = next((c for t, c in sorted(chains.items()) if t.split(".")[0] == "torch"), None)
            if torch_chain is not None:
                found[module] = torch_chain
    return found


def oversized() -> dict[str, int]:
    found = {}
    for path in modules().values():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found[path.relative_to(ROOT).as_posix()] = lines
    return found


# -- the tests ----------------------------------------------------------------------------------------------


def test_the_parser_sees_lazy_type_only_relative_and_from_package_imports() -> None:
    found = {(i.importer, i.target, i.kind) for i in imports()}
    # A function-level import, an `if TYPE_CHECKING:` import, and `from package import submodule`.
    assert ("fabric_core.strategies.strategy", "fabric_core.io.torch_io", "lazy") in found
    assert ("fabric_core.strategies.strategy", "fabric_core.launchers.launcher", "type") in found
    assert ("fabric_core.strategies.parallel", "fabric_core._distributed.exit_handshake", "module") in found
    assert any(i.importer.startswith("fabric_core_") for i in imports())  # plugin packages are parsed
    assert len(modules()) > 150


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    edges = graph()
    planted = {**edges, "fabric_core.errors": {"fabric_core.fabric": Import("fabric_core.errors", "x", 1, "lazy")}}
    groups = strongly_connected(planted)
    group = next(g for g in groups if "fabric_core.errors" in g)
    cycle = a_cycle(group, planted)
    assert cycle[0].importer == cycle[-1].target and len(cycle) >= 2


def test_no_import_cycles() -> None:
    edges = graph()
    cycles = [a_cycle(group, edges) for group in strongly_connected(edges)]
    report = "\n\n".join(
        f"{len(group)} modules import each other: {', '.join(group)}\n  a cycle:\n    "
        + "\n    ".join(str(item) for item in cycle)
        for group, cycle in zip(strongly_connected(edges), cycles)
    )
    assert not cycles, f"Import cycles (lazy and TYPE_CHECKING imports count):\n{report}"


def test_each_layer_imports_only_its_own_and_lower_layers() -> None:
    bad = layer_violations()
    report = "\n".join(f"{item}: {layer_of(item.importer)} imports {layer_of(item.target)}" for item in bad.values())
    assert not bad, f"Imports up the layers ({' < '.join(LAYERS)}):\n{report}"


def test_the_kernel_imports_only_the_foundation_and_its_own_contract() -> None:
    """The ground floor: the kernel knows the contract it defines and the torch-free leaves, nothing it hosts."""
    bad = [
        item
        for importer, targets in graph().items()
        if layer_of(importer) == "kernel"
        for target, item in targets.items()
        if target in modules() and layer_of(target) not in ("foundation", "kernel")
    ]
    assert not bad, "The kernel imports above it:\n" + "\n".join(map(str, bad))


def test_the_private_packages_import_each_other_only_one_way() -> None:
    bad = package_violations()
    report = "\n".join(
        f"{item}: {private_package(item.importer)} may import only "
        f"{sorted(PACKAGE_IMPORTS[str(private_package(item.importer))])}"
        for item in bad
    )
    assert not bad, f"Imports between the private packages the wrong way:\n{report}"


def test_a_planted_wrong_way_import_is_caught() -> None:
    edges = {importer: dict(targets) for importer, targets in graph().items()}
    # the kernel reaching up into the Fabric object: wrong in the layers and between the packages
    kernel_up = Import("fabric_core._kernel.registry", "fabric_core._fabric.assembly", 1, "lazy")
    edges.setdefault(kernel_up.importer, {})[kernel_up.target] = kernel_up
    # the Fabric object's internals using the run command: the same layer (api), the wrong package direction
    sideways = Import("fabric_core._fabric.checks", "fabric_core._run.worker", 1, "module")
    edges.setdefault(sideways.importer, {})[sideways.target] = sideways
    assert (kernel_up.importer, kernel_up.target) in layer_violations(edges)
    assert (sideways.importer, sideways.target) not in layer_violations(edges)
    assert {kernel_up, sideways} <= set(package_violations(edges))
    assert not package_violations()  # and nothing of it is in the tree


def test_plugins_import_only_public_fabric_core_modules() -> None:
    bad = private_imports()
    report = "\n".join(f"{target}: {', '.join(str(i) for i in items)}" for target, items in bad.items())
    assert not bad, f"Plugins import private fabric_core modules:\n{report}"


def test_torch_free_layers_do_not_import_torch_when_imported() -> None:
    bad = torch_at_import()
    report = "\n".join(" -> ".join(chain) for chain in bad.values())
    assert not bad, f"Modules of the torch-free layers import torch at module level:\n{report}"


def test_no_module_over_600_lines() -> None:
    bad = oversized()
    assert not bad, f"Modules over {MAX_LINES} lines (split them): {bad}"


def test_every_module_has_a_layer() -> None:
    assert {layer_of(m) for m in modules()} <= set(LAYERS)


if __name__ == "__main__":  # `python tests/test_layers.py`: print every finding at once
    for group in strongly_connected(graph()):
        print("cycle:", " -> ".join(f"{i.importer}[{i.line},{i.kind}]" for i in a_cycle(group, graph())))
    for item in layer_violations().values():
        print(f"up: {item} ({layer_of(item.importer)} -> {layer_of(item.target)})")
    for target, items in private_imports().items():
        print("private:", target, len(items))
    for chain in torch_at_import().values():
        print("torch:", " -> ".join(chain))
    print("oversized:", oversized())
