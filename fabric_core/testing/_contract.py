"""``check_plugin``: the contract every plugin must meet, checked against its installed distribution."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from importlib import metadata

from fabric_core._kernel.manager import ENTRY_POINT_GROUP, PluginManager
from fabric_core._kernel.registry import import_target

__all__ = ["check_plugin"]

_HEAVY = ("torch", "deepspeed", "bitsandbytes", "torch_xla", "tensorboard", "tensorboardX")
_PROBE_IMPORTS = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps(heavy))
"""


def _private_imports(module: str) -> list[str]:
    """The private ``fabric_core`` modules ``module``'s source imports (at any depth: lazy and type-only too)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return []
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), spec.origin)
    found: set[str] = set()

    def private(target: str) -> bool:
        parts = target.split(".")
        return parts[0] == "fabric_core" and any(p.startswith("_") and p != "__main__" for p in parts[1:])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if private(a.name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if private(node.module):  # `from fabric_core._kernel.registry import Registry`: that module
                found.add(node.module)
            else:  # `from fabric_core import _kernel`: the private module imported by name
                found.update(f"{node.module}.{a.name}" for a in node.names if private(f"{node.module}.{a.name}"))
    return sorted(found)


def _registration_module(name: str, group: str) -> str | None:
    for ep in metadata.entry_points(group=group):
        if ep.name.lower() == name:
            return ep.value.partition(":")[0]
    return None


def check_plugin(name: str, *, group: str = ENTRY_POINT_GROUP, import_targets: bool = True) -> list[str]:
    """Check an installed plugin against the plugin contract.

    The checks: the plugin is installed and loads; its registration module imports no heavy library
    (torch, deepspeed, bitsandbytes, torch_xla, tensorboard) in a fresh interpreter, and no private
    ``fabric_core._*`` module (only :mod:`fabric_core.plugin_api` and public modules); it registers at least one
    component; names are unique within the plugin and lower-case; every entry has a description; every
    target imports when its requirements are installed; every probe returns a ``bool`` without raising.

    Args:
        name: The plugin's entry-point name (``"ddp"``).
        group: The entry-point group.
        import_targets: Also import every target whose requirements are met (slower).

    Returns:
        The problems found, one sentence each; an empty list means the plugin passes.
    """
    name = name.lower()
    module = _registration_module(name, group)
    if module is None:
        return [f"no entry point named {name!r} in the group {group!r}: is the plugin installed?"]
    problems: list[str] = []
    result = subprocess.run(
        [sys.executable, "-c", _PROBE_IMPORTS, module, json.dumps(_HEAVY)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    if result.returncode != 0:
        problems.append(f"importing {module} failed: {result.stderr.strip().splitlines()[-1:]}")
    elif json.loads(result.stdout.strip().splitlines()[-1]):
        problems.append(f"importing {module} imports {', '.join(json.loads(result.stdout.splitlines()[-1]))}")

    for private in _private_imports(module):
        problems.append(
            f"{module} imports the private module {private}: a plugin imports only fabric_core.plugin_api "
            "(and public fabric_core modules), which keep working across core releases"
        )

    manager = PluginManager(allow=[name], group=group, strict=False, environ={})
    record = next((r for r in manager.records if r.name == name), None)
    if record is None or record.status != "loaded":
        problems.append(f"the plugin does not load: {record.reason if record else 'not found'}")
        return problems
    entries = [e for e in manager.catalog.entries() if e.plugin == name]
    if not entries:
        problems.append("it registers no component")
    keys = Counter((e.kind, n) for e in entries for n in (e.name, *e.aliases))
    problems += [f"the {kind} name {n!r} is registered {c} times" for (kind, n), c in keys.items() if c > 1]
    for entry in entries:
        label = f"{entry.kind} {entry.name!r}"
        if any(n != n.lower() for n in (entry.name, *entry.aliases)):
            problems.append(f"{label}: names must be lower-case")
        if not entry.description.strip():
            problems.append(f"{label}: no description")
        if entry.probe is not None:
            try:
                answer = import_target(entry.probe)()
            except Exception as exc:
                problems.append(f"{label}: probe {entry.probe} raised {exc!r}")
            else:
                if not isinstance(answer, bool):
                    problems.append(f"{label}: probe {entry.probe} returned {answer!r}, not a bool")
        if import_targets and not entry.missing_requirements():
            try:
                entry.load()
            except Exception as exc:
                problems.append(f"{label}: target {entry.target} does not import: {exc}")
    return problems
