"""Lightning-style import paths resolve the core's classes and installed plugins' classes lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_core_classes_under_lightning_paths() -> None:
    from fabric_core.accelerators import Accelerator, CPUAccelerator
    from fabric_core.loggers import CSVLogger, Logger
    from fabric_core.plugins import CheckpointIO, DoublePrecision, MixedPrecision, Precision, TorchCheckpointIO
    from fabric_core.plugins.environments import LightningEnvironment, SLURMEnvironment
    from fabric_core.plugins.precision import HalfPrecision
    from fabric_core.strategies import SingleDeviceStrategy, Strategy

    assert issubclass(CPUAccelerator, Accelerator)
    assert issubclass(SingleDeviceStrategy, Strategy)
    assert issubclass(CSVLogger, Logger)
    assert issubclass(TorchCheckpointIO, CheckpointIO)
    for cls in (DoublePrecision, MixedPrecision, HalfPrecision):
        assert issubclass(cls, Precision)
    assert SLURMEnvironment.__module__ == "fabric_core.environments.slurm"
    assert LightningEnvironment.__name__ == "LightningEnvironment"


def test_installed_plugin_classes_come_from_the_catalog() -> None:
    pytest.importorskip("fabric_core_tensorboard")
    import fabric_core.loggers

    cls = fabric_core.loggers.TensorBoardLogger
    assert cls.__module__ == "fabric_core_tensorboard.logger"
    assert "TensorBoardLogger" in dir(fabric_core.loggers)


def test_unknown_class_lists_what_is_there() -> None:
    import fabric_core.strategies

    with pytest.raises(AttributeError, match=r"no attribute 'NoSuchStrategy'.*SingleDeviceStrategy"):
        _ = fabric_core.strategies.NoSuchStrategy


def test_import_paths_are_lazy() -> None:
    code = (
        "import sys, fabric_core.strategies, fabric_core.plugins, fabric_core.loggers, fabric_core.plugins.precision, "
        "fabric_core.plugins.environments, fabric_core.plugins.io, fabric_core.plugins.collectives, "
        "fabric_core.strategies.launchers; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
