"""The installed distribution advertises the plugin, and registering it stays free of torch."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from fabric_core._kernel.registry import Registry
from fabric_core_tensorboard import _plugin


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    found = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "tensorboard"]
    assert len(found) == 1
    (ep,) = found
    assert ep.value == "fabric_core_tensorboard._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-tensorboard"
    assert ep.load() is _plugin


def test_distribution_requires_the_core_and_tensorboard() -> None:
    requires = metadata.requires("fabric-core-tensorboard") or []
    assert "fabric-core<0.2,>=0.1" in requires
    assert "tensorboard>=2.14" in requires
    assert 'tensorboardX>=2.6; extra == "tensorboardx"' in requires


def test_registration_adds_the_tensorboard_logger() -> None:
    registry = Registry("logger", "tensorboard")
    _plugin.fabric_core_register_loggers(registry=registry)
    (entry,) = registry.entries
    assert (entry.kind, entry.name) == ("logger", "tensorboard")
    assert entry.target == "fabric_core_tensorboard.logger:TensorBoardLogger"
    assert entry.requires == ("tensorboard",)
    assert entry.missing_requirements() == []


def test_the_registered_entry_builds_a_logger(tmp_path: Path) -> None:
    from fabric_core_tensorboard.logger import TensorBoardLogger

    registry = Registry("logger", "tensorboard")
    _plugin.fabric_core_register_loggers(registry=registry)
    logger = registry.entries[0].build({"root_dir": str(tmp_path), "name": "exp"})
    assert isinstance(logger, TensorBoardLogger)
    assert logger.log_dir == str(tmp_path / "exp" / "version_0")


@pytest.mark.timeout(60)
def test_importing_the_registration_module_does_not_import_torch() -> None:
    code = (
        "import sys, fabric_core_tensorboard, fabric_core_tensorboard._plugin; "
        "heavy = sorted(m for m in ('torch', 'tensorboard', 'tensorboardX') if m in sys.modules); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_plugin_manager_discovers_and_builds_it(tmp_path: Path) -> None:
    from fabric_core import PluginManager
    from fabric_core_tensorboard.logger import TensorBoardLogger

    manager = PluginManager(allow=["tensorboard"], strict=True, environ={})
    (record,) = [r for r in manager.records if r.name == "tensorboard"]
    assert record.status == "loaded"
    assert (record.distribution, record.version) == ("fabric-core-tensorboard", "0.1.0")
    entry = manager.catalog.get("logger", "tensorboard")
    assert entry.plugin == "tensorboard"
    logger = entry.build({"root_dir": str(tmp_path)})
    assert isinstance(logger, TensorBoardLogger)
