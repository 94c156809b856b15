"""The installed distribution advertises the plugin, and registering it imports neither torch nor torch_xla."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import pytest

from fabric_core import PluginManager
from fabric_core._kernel.registry import Registry
from fabric_core_xla import _plugin


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "xla"]
    assert ep.value == "fabric_core_xla._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-xla"
    assert ep.load() is _plugin


def test_distribution_requires_the_core_and_offers_torch_xla_as_an_extra() -> None:
    assert metadata.requires("fabric-core-xla") == ["fabric-core<0.2,>=0.1", 'torch_xla; extra == "xla"']


def test_registration() -> None:
    registered = {}
    for kind, hook in (
        ("accelerator", _plugin.fabric_core_register_accelerators),
        ("strategy", _plugin.fabric_core_register_strategies),
        ("precision", _plugin.fabric_core_register_precisions),
    ):
        registry = Registry(kind, "xla")
        hook(registry=registry)
        registered.update({(kind, e.name): e for e in registry.entries})
    assert sorted(registered) == [
        ("accelerator", "tpu"),
        ("precision", "xla-16-true"),
        ("precision", "xla-32-true"),
        ("precision", "xla-bf16-true"),
        ("strategy", "single_xla"),
        ("strategy", "xla"),
        ("strategy", "xla_fsdp"),
    ]
    tpu = registered["accelerator", "tpu"]
    assert (tpu.aliases, tpu.priority, tpu.probe) == (("xla",), 30, "fabric_core_xla.accelerator:probe")
    assert registered["precision", "xla-bf16-true"].defaults == {"precision": "bf16-true"}
    assert registered["strategy", "xla_fsdp"].target == "fabric_core_xla.fsdp:XLAFSDPStrategy"


@pytest.mark.timeout(60)
def test_registration_the_probe_and_the_package_import_neither_torch_nor_torch_xla() -> None:
    code = (
        "import sys, fabric_core_xla, fabric_core_xla._plugin, fabric_core_xla.device as d; "
        "from fabric_core._kernel.registry import Registry; "
        "fabric_core_xla._plugin.fabric_core_register_accelerators(Registry('accelerator', 'xla')); "
        "d.is_available(); "
        "heavy = [m for m in ('torch', 'torch_xla') if m in sys.modules]; print(heavy); "
        "sys.exit(1 if heavy else 0)"
    )
    # With PJRT_DEVICE=CPU the probe counts devices from the environment even where torch_xla is installed.
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_plugin_manager_discovers_it() -> None:
    manager = PluginManager(allow=["xla"], strict=True, environ={})
    (record,) = [r for r in manager.records if r.name == "xla"]
    assert (record.status, record.distribution, record.version) == ("loaded", "fabric-core-xla", "0.1.0")
    assert manager.catalog.get("accelerator", "xla") is manager.catalog.get("accelerator", "tpu")
