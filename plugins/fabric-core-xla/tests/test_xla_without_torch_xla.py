"""Every XLA component says how to install torch_xla when it is built without it."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest
import torch

from fabric_core_xla import device

pytestmark = pytest.mark.skipif(device.xla_installed(), reason="torch_xla is installed here")

COMPONENTS = [
    ("fabric_core_xla.accelerator", "XLAAccelerator", {}),
    ("fabric_core_xla.strategy", "XLAStrategy", {}),
    ("fabric_core_xla.single_device", "SingleDeviceXLAStrategy", {}),
    ("fabric_core_xla.fsdp", "XLAFSDPStrategy", {}),
    ("fabric_core_xla.precision", "XLAPrecision", {"precision": "bf16-true"}),
    ("fabric_core_xla.checkpoint_io", "XLACheckpointIO", {}),
    # Lightning's deprecated classes warn first, then need torch_xla as their bases do.
    ("fabric_core_xla.precision", "TPUPrecision", {}),
    ("fabric_core_xla.precision", "XLABf16Precision", {}),
    ("fabric_core_xla.precision", "TPUBf16Precision", {}),
]


@pytest.mark.parametrize(("module", "name", "kwargs"), COMPONENTS, ids=[c[1] for c in COMPONENTS])
def test_building_a_component_without_torch_xla_names_the_install_command(
    module: str, name: str, kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    cls = getattr(importlib.import_module(module), name)
    monkeypatch.delenv("XLA_USE_BF16", raising=False)
    with pytest.raises(ModuleNotFoundError, match=rf"`{name}` needs torch_xla.*pip install torch_xla.*torch 2\.9"):
        if name.startswith(("TPU", "XLABf16")):
            with pytest.warns(DeprecationWarning, match=rf"`{name}` class is deprecated"):
                cls(**kwargs)
        else:
            cls(**kwargs)


def test_a_refused_precision_is_reported_before_torch_xla_is_looked_for() -> None:
    from fabric_core.errors import InvalidConfigError
    from fabric_core_xla.precision import XLAPrecision

    with pytest.raises(InvalidConfigError, match=r"`precision='16-mixed'\)` is not supported in XLA.*'bf16-true'"):
        XLAPrecision("16-mixed")


def test_a_failed_precision_leaves_no_environment_variable_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from fabric_core_xla.precision import XLAPrecision

    monkeypatch.delenv("XLA_USE_BF16", raising=False)
    with pytest.raises(ModuleNotFoundError):
        XLAPrecision("bf16-true")
    assert "XLA_USE_BF16" not in os.environ


def test_the_launcher_and_the_environment_need_it_too() -> None:
    from fabric_core_xla.environment import XLAEnvironment
    from fabric_core_xla.launcher import XLALauncher

    with pytest.raises(ModuleNotFoundError, match="`XLALauncher` needs torch_xla"):
        XLALauncher(strategy=None)  # type: ignore[arg-type]
    # As Lightning's: the environment is refused when built, not at its first question.
    with pytest.raises(ModuleNotFoundError, match=r"`XLAEnvironment` needs torch_xla.*pip install torch_xla"):
        XLAEnvironment()
    assert XLAEnvironment.detect() is False


def test_the_environment_has_no_rendezvous_address(monkeypatch: pytest.MonkeyPatch) -> None:
    from fabric_core_xla import environment

    # As Lightning's tests pretend torch_xla: its flag, and a module in its place.
    monkeypatch.setattr(environment, "_XLA_AVAILABLE", True)
    monkeypatch.setitem(sys.modules, "torch_xla", ModuleType("torch_xla"))
    built = environment.XLAEnvironment()
    assert built.creates_processes_externally is False
    with pytest.raises(NotImplementedError, match="own rendezvous"):
        _ = built.main_address


def test_xla_fsdp_module_sharded_context_changes_nothing() -> None:
    from fabric_core_xla.fsdp import XLAFSDPStrategy

    # Building the strategy needs torch_xla; the context uses none of its state (Lightning's is a nullcontext).
    strategy = XLAFSDPStrategy.__new__(XLAFSDPStrategy)
    with strategy.module_sharded_context():
        created = torch.nn.Linear(2, 2)
    assert created.weight.device == torch.device("cpu")


@pytest.mark.parametrize(
    ("package", "name", "base"),
    [
        ("accelerators", "TPUAccelerator", "XLAAccelerator"),
        ("strategies", "SingleTPUStrategy", "SingleDeviceXLAStrategy"),
    ],
)
def test_tpu_aliases_are_deprecated_xla_classes_as_in_lightning(package: str, name: str, base: str) -> None:
    import importlib

    kwargs = {"device": 0} if package == "strategies" else {}  # Lightning's strategy needs its device

    ours = getattr(importlib.import_module(f"fabric_core.{package}"), name)
    assert issubclass(ours, getattr(importlib.import_module(f"fabric_core.{package}"), base))
    lightning = pytest.importorskip(f"lightning_fabric.{package}")
    theirs = getattr(lightning, name)
    for cls in (ours, theirs):
        with pytest.warns(
            DeprecationWarning, match=f"`{name}` class is deprecated|'single_tpu' strategy is deprecated"
        ):
            with pytest.raises(ModuleNotFoundError):
                cls(**kwargs)
