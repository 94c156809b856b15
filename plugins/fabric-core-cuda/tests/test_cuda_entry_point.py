"""The installed distribution advertises the plugin, and registering it stays free of torch."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from fabric_core import PluginManager
from fabric_core._kernel.registry import Registry
from fabric_core_cuda import _plugin


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "cuda"]
    assert ep.value == "fabric_core_cuda._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-cuda"
    assert ep.load() is _plugin


def test_distribution_requires_only_the_core() -> None:
    assert metadata.requires("fabric-core-cuda") == ["fabric-core<0.2,>=0.1"]


def test_registration_adds_cuda_between_cpu_and_xla() -> None:
    registry = Registry("accelerator", "cuda")
    _plugin.fabric_core_register_accelerators(registry=registry)
    (entry,) = registry.entries
    assert (entry.name, entry.target) == ("cuda", "fabric_core_cuda.accelerator:CUDAAccelerator")
    assert entry.priority == 20
    assert entry.probe == "fabric_core_cuda.accelerator:probe"


@pytest.mark.timeout(60)
def test_registration_and_the_package_import_no_torch() -> None:
    code = (
        "import sys, fabric_core_cuda, fabric_core_cuda._plugin; "
        "from fabric_core._kernel.registry import Registry; "
        "fabric_core_cuda._plugin.fabric_core_register_accelerators(Registry('accelerator', 'cuda')); "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_plugin_manager_discovers_it() -> None:
    manager = PluginManager(allow=["cuda"], strict=True, environ={})
    (record,) = [r for r in manager.records if r.name == "cuda"]
    assert (record.status, record.distribution, record.version) == ("loaded", "fabric-core-cuda", "0.1.0")
    assert manager.catalog.get("accelerator", "cuda").plugin == "cuda"


def test_lazy_package_attributes() -> None:
    import fabric_core_cuda

    assert fabric_core_cuda.CUDAAccelerator.device_type == "cuda"
    assert fabric_core_cuda.num_cuda_devices is fabric_core_cuda.accelerator.num_cuda_devices
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fabric_core_cuda.nope  # noqa: B018
