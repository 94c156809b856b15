"""Helpers of the differential tests that call Lightning Fabric and fabric-core the same way, side by side.

Both packages are named by :data:`PACKAGES`; :func:`module` imports the same dotted path under either.
:func:`pretend_xla` does on both what Lightning's own test fixtures ``mock_xla_available`` and
``mock_tpu_available`` do on Lightning, so that a case written for Lightning's tests runs on both.
:func:`close_lightning_group` ends a real Lightning job's process group the way fabric-core's workers do.
"""

from __future__ import annotations

import gc
import importlib
import sys
from types import ModuleType
from typing import Final
from unittest.mock import Mock

import pytest
import torch

PACKAGES: Final = ("lightning_fabric", "fabric_core")
#: Lightning's paths whose ``_XLA_AVAILABLE`` its tests set to pretend torch_xla (``mock_xla_available``).
XLA_FLAGS: Final = (
    "accelerators.xla",
    "plugins.environments.xla",
    "plugins.precision.xla",
    "plugins.io.xla",
    "strategies.single_xla",
    "strategies.xla_fsdp",
    "strategies.launchers.xla",
)
#: The torch_xla modules those fixtures stand in for.
_TORCH_XLA_MODULES: Final = (
    "torch_xla",
    "torch_xla.core.xla_model",
    "torch_xla.experimental",
    "torch_xla.distributed.fsdp.wrap",
)


def module(package: str, path: str) -> ModuleType:
    """``package.path``, imported (``module("fabric_core", "accelerators.xla")``)."""
    return importlib.import_module(f"{package}.{path}")


def pretend_xla(monkeypatch: pytest.MonkeyPatch, devices: int | None = None) -> None:
    """Pretend torch_xla on both packages; with ``devices``, that many TPU devices too (``mock_tpu_available``).

    Sets the ``_XLA_AVAILABLE`` flags, puts stand-ins for torch_xla in ``sys.modules`` and clears the
    ``XLA_USE_*`` variables that would change the precision; undone by ``monkeypatch`` after the test.
    """
    for package in PACKAGES:
        for path in XLA_FLAGS:
            monkeypatch.setattr(module(package, path), "_XLA_AVAILABLE", True)
        if devices is not None:
            accelerator = module(package, "accelerators.xla").XLAAccelerator
            monkeypatch.setattr(accelerator, "is_available", lambda: devices > 0)
            monkeypatch.setattr(accelerator, "auto_device_count", lambda *_: devices)
    for name in _TORCH_XLA_MODULES:
        monkeypatch.setitem(sys.modules, name, Mock())
    for name in ("XLA_USE_F16", "XLA_USE_BF16"):
        monkeypatch.delenv(name, raising=False)


def close_lightning_group(fabric: object) -> None:
    """On Lightning's side of a real multi-process comparison, end the process group as fabric-core's workers do.

    Lightning's workers exit with the gloo group still open, and torch 2.13 then aborts a worker at exit
    ("terminate called without an active exception") about once in fifteen runs, with or without fabric-core
    imported (2 in 30 runs of a bare ``ddp`` and of a bare ``ddp_spawn`` Lightning job). Destroying the group
    is not enough while unreachable objects of finished collectives wait for the garbage collector: they are
    then freed during interpreter shutdown (a two-rank script: 2 aborts in 30 with barrier and destroy, 0 in 30
    with ``gc.collect()`` first). fabric-core's strategies collect, meet their peers and destroy the group at
    teardown (``ParallelStrategy._close_process_group``), so on its side this does nothing; the comparisons
    that call it are about results, not about how Lightning exits.
    """
    if type(fabric).__module__.startswith("lightning_fabric") and torch.distributed.is_initialized():
        gc.collect()
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
