"""The installed distribution advertises the plugin, and registering it stays free of torch."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from fabric_core import PluginManager
from fabric_core._kernel.registry import Registry
from fabric_core_mps import _plugin


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "mps"]
    assert ep.value == "fabric_core_mps._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-mps"
    assert ep.load() is _plugin


def test_distribution_requires_only_the_core() -> None:
    assert metadata.requires("fabric-core-mps") == ["fabric-core<0.2,>=0.1"]


def test_registration_adds_mps_in_the_gpu_band() -> None:
    registry = Registry("accelerator", "mps")
    _plugin.fabric_core_register_accelerators(registry=registry)
    (entry,) = registry.entries
    assert (entry.name, entry.target) == ("mps", "fabric_core_mps.accelerator:MPSAccelerator")
    assert (entry.priority, entry.probe) == (20, "fabric_core_mps.accelerator:probe")


@pytest.mark.timeout(60)
def test_registration_the_probe_and_the_package_import_no_torch() -> None:
    code = (
        "import os, sys, fabric_core_mps, fabric_core_mps._plugin, fabric_core_mps.device; "
        "from fabric_core._kernel.registry import Registry; "
        "fabric_core_mps._plugin.fabric_core_register_accelerators(Registry('accelerator', 'mps')); "
        "assert fabric_core_mps.device.is_available() is False; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_plugin_manager_discovers_it() -> None:
    manager = PluginManager(allow=["mps"], strict=True, environ={})
    (record,) = [r for r in manager.records if r.name == "mps"]
    assert (record.status, record.distribution, record.version) == ("loaded", "fabric-core-mps", "0.1.0")
    assert manager.catalog.get("accelerator", "mps").plugin == "mps"
