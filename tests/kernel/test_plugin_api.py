"""The public plugin contract: torch-free, the only fabric-core import of registration modules, no circles."""

from __future__ import annotations

import ast
import importlib
import importlib.util
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
#: The kernel (discovery, registration, hooks, selection), the core's own plugin and building: never in a circle.
KERNEL = (
    "fabric_core._fabric.assembly",
    "fabric_core._builtin",
    "fabric_core._kernel.context",
    "fabric_core._kernel.manager",
    "fabric_core._kernel.registry",
    "fabric_core._kernel.selection",
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


# Import circles, the kernel's included, are checked for every module of fabric_core and of every plugin in
# tests/test_layers.py (lazy and type-only imports count there too).


def test_components_declare_their_kind_through_the_contract() -> None:
    """How the kernel tells a component passed to ``Fabric(...)`` without importing the classes above it."""
    from fabric_core.accelerators.cpu import CPUAccelerator
    from fabric_core.environments.lightning import LightningEnvironment
    from fabric_core.io.torch_io import TorchCheckpointIO
    from fabric_core.precision.precision import Precision
    from fabric_core.strategies.single_device import SingleDeviceStrategy

    assert plugin_api.component_kind(CPUAccelerator()) == "accelerator"
    assert plugin_api.component_kind(SingleDeviceStrategy) == "strategy"
    assert plugin_api.component_kind(Precision()) == "precision"
    assert plugin_api.component_kind(LightningEnvironment()) == "environment"
    assert plugin_api.component_kind(TorchCheckpointIO()) == "checkpoint_io"
    assert plugin_api.component_kind(object()) is None and plugin_api.component_kind("cpu") is None


def test_the_core_plugin_is_found_through_its_entry_point_and_loaded_first() -> None:
    from importlib.metadata import distribution

    declared = [ep for ep in distribution("fabric-core").entry_points if ep.group == "fabric_core.plugins"]
    assert [(ep.name, ep.value) for ep in declared] == [("builtin", "fabric_core._builtin")]
    records = fabric_core.PluginManager(autoload=False).records
    assert (records[0].name, records[0].status, records[0].module) == ("builtin", "loaded", "fabric_core._builtin")


def test_lazy_exports_import_each_name_on_first_access(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    package = types.ModuleType("my_plugin")
    package.__version__ = "1"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "my_plugin", package)
    getattr_, dir_ = plugin_api.lazy_exports("my_plugin", {"ArgumentParser": "argparse", "Joined": "os.path:join"})
    import argparse
    import os.path

    assert getattr_("ArgumentParser") is argparse.ArgumentParser
    assert getattr_("Joined") is os.path.join
    with pytest.raises(AttributeError, match="module 'my_plugin' has no attribute 'Missing'"):
        getattr_("Missing")
    assert {"ArgumentParser", "Joined", "__version__"} <= set(dir_())
    monkeypatch.setattr(argparse, "ArgumentParser", int)  # nothing is cached: a patched source answers
    assert getattr_("ArgumentParser") is int


PLUGIN_PACKAGES = sorted(ROOT.glob("plugins/*/fabric_core_*/__init__.py"))


@pytest.mark.parametrize("path", PLUGIN_PACKAGES, ids=lambda p: p.parent.name)
def test_plugin_packages_export_through_lazy_exports(path: Path) -> None:
    """Every first-party plugin and the template use the contract's helper, not a ``__getattr__`` of their own."""
    tree = ast.parse(path.read_text())
    assert not [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    assert "fabric_core.plugin_api.lazy_exports" in {name for _, name in _imports(path)}
    assert len(PLUGIN_PACKAGES) == 12
    if importlib.util.find_spec(path.parent.name) is None:
        return  # the template is not installed
    package = importlib.import_module(path.parent.name)
    for name in package.__all__:
        assert name in dir(package)
        getattr(package, name)  # imports, or the test fails


def test_registers_makes_a_registration_hook_from_what_it_adds() -> None:
    import types

    plugin = types.ModuleType("declared_plugin")
    plugin.fabric_core_register_loggers = plugin_api.registers(  # type: ignore[attr-defined]
        plugin_api.component("lines", "logging:Logger", description="Lines.", defaults={"name": "x"}, priority=3),
        plugin_api.component("other", "logging:Logger", description="Other.", aliases=("another",)),
    )
    plugin.fabric_core_register_modules = plugin_api.module_paths(  # type: ignore[attr-defined]
        {"loggers.lines": "logging"}
    )
    manager = fabric_core.PluginManager(autoload=False, plugins={"declared": plugin})
    assert manager.records[-1].status == "loaded"
    lines = manager.catalog.get("logger", "lines")
    assert (lines.target, dict(lines.defaults), lines.priority, lines.plugin) == (
        "logging:Logger",
        {"name": "x"},
        3,
        "declared",
    )
    assert manager.catalog.get("logger", "another").name == "other"
    modules = plugin_api.ModuleRegistry("declared")
    plugin.fabric_core_register_modules(modules)  # type: ignore[attr-defined]
    assert modules.declarations == [plugin_api.ModuleDeclaration("loggers.lines", "logging", "declared")]


def test_a_component_with_an_option_registry_add_does_not_take_fails_its_plugin_only() -> None:
    import types

    plugin = types.ModuleType("typo_plugin")
    plugin.fabric_core_register_loggers = plugin_api.registers(  # type: ignore[attr-defined]
        plugin_api.component("lines", "logging:Logger", description="Lines.", prority=3)
    )
    manager = fabric_core.PluginManager(autoload=False, plugins={"typo": plugin})
    with pytest.warns(plugin_api.PluginWarning, match="prority"):
        assert manager.catalog.find("logger", "lines") is None
    assert manager.catalog.find("logger", "csv") is not None


def test_bf16_on_cpu_turns_16_mixed_on_a_cpu_into_bf16_mixed_with_one_warning() -> None:
    catalog = fabric_core.PluginManager(autoload=False).catalog
    cpu = plugin_api.SelectionContext(catalog, device_type="cpu", strategy="fsdp")
    with pytest.warns(plugin_api.FabricCoreWarning, match="AMP with fp16 is not supported on CPU.*strategy 'fsdp'"):
        assert plugin_api.bf16_on_cpu("16-mixed", cpu) == "bf16-mixed"
    cuda = plugin_api.SelectionContext(catalog, device_type="cuda")
    assert plugin_api.bf16_on_cpu("16-mixed", cuda) == "16-mixed"
    assert plugin_api.bf16_on_cpu("bf16-true", cpu) == "bf16-true"
