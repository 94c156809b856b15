"""``accelerator="auto"`` across the hardware plugins: xla (30) > cuda (20) = mps (20) > cpu (0).

The order comes only from each entry's priority and probe, so an out-of-tree accelerator slots in between
without any change to the core. Which hardware "exists" is set by patching each plugin's one probe function
(this machine has none of it).
"""

from __future__ import annotations

from typing import Any

import pytest

from fabric_core._kernel.manager import PluginManager, plugin_module
from fabric_core._kernel.selection import select
from fabric_core.errors import InvalidConfigError
from fabric_core.testing import make_manager

cuda_plugin = pytest.importorskip("fabric_core_cuda._plugin")
mps_plugin = pytest.importorskip("fabric_core_mps._plugin")
xla_plugin = pytest.importorskip("fabric_core_xla._plugin")

import fabric_core_cuda.accelerator as cuda_accelerator  # noqa: E402 - after the skips above
import fabric_core_mps.device as mps_device  # noqa: E402
import fabric_core_xla.device as xla_device  # noqa: E402

#: A third-party accelerator between xla and the GPUs; its probe answers from this module's flag.
NPU_AVAILABLE = {"value": False}


def npu_is_available() -> bool:
    return NPU_AVAILABLE["value"]


def _register_npu(registry: Any) -> None:
    registry.add(
        "npu",
        "fabric_core.accelerators.cpu:CPUAccelerator",
        description="a third-party accelerator",
        priority=25,
        probe=f"{__name__}:npu_is_available",
    )


def manager(with_npu: bool = False) -> PluginManager:
    plugins: list[Any] = [("cuda", cuda_plugin), ("mps", mps_plugin), ("xla", xla_plugin)]
    if with_npu:
        plugins.append(("npu", plugin_module("npu", {"fabric_core_register_accelerators": _register_npu})))
    return make_manager(*plugins)


@pytest.fixture
def hardware(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set what this machine has: ``hardware(xla=4, cuda=2, mps=True, npu=True)``."""

    def set_hardware(*, xla: int = 0, cuda: int = 0, mps: bool = False, npu: bool = False) -> None:
        monkeypatch.setattr(xla_device, "num_xla_devices", lambda: xla)
        monkeypatch.setattr(cuda_accelerator, "num_cuda_devices", lambda: cuda)
        monkeypatch.setattr(mps_device, "is_available", lambda: mps)
        monkeypatch.setitem(NPU_AVAILABLE, "value", npu)

    return set_hardware


def auto(with_npu: bool = False) -> str:
    accelerator = select(manager(with_npu), devices=1).context.accelerator
    assert accelerator is not None
    return accelerator


def test_the_priorities_are_registered_in_bands() -> None:
    catalog = manager(with_npu=True).catalog
    assert {e.name: e.priority for e in catalog.entries("accelerator")} == {
        "cpu": 0,
        "cuda": 20,
        "mps": 20,
        "tpu": 30,
        "npu": 25,
    }


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        ({}, "cpu"),
        ({"cuda": 1}, "cuda"),
        ({"mps": True}, "mps"),
        ({"xla": 4}, "tpu"),
        ({"xla": 4, "cuda": 8}, "tpu"),
        ({"xla": 1, "mps": True}, "tpu"),
    ],
)
def test_auto_takes_the_highest_available(hardware: Any, machine: dict[str, Any], expected: str) -> None:
    hardware(**machine)
    assert auto() == expected


@pytest.mark.parametrize(
    ("machine", "expected"),
    [({"npu": True, "cuda": 2}, "npu"), ({"npu": True, "xla": 4}, "tpu"), ({"npu": False, "cuda": 2}, "cuda")],
)
def test_a_third_party_accelerator_slots_in_between(hardware: Any, machine: dict[str, Any], expected: str) -> None:
    hardware(**machine)
    assert auto(with_npu=True) == expected


def test_two_available_in_one_band_is_an_error_naming_both(hardware: Any) -> None:
    # Never happens on real hardware (no machine has both), but must not be decided silently.
    hardware(cuda=1, mps=True)
    with pytest.raises(InvalidConfigError, match=r"more than one available accelerator at priority 20: cuda, mps"):
        auto()


def test_gpu_follows_the_same_probes(hardware: Any) -> None:
    hardware(cuda=1)
    assert select(manager(), accelerator="gpu").context.accelerator == "cuda"
    hardware(mps=True)
    assert select(manager(), accelerator="gpu").context.accelerator == "mps"
    hardware()
    with pytest.raises(InvalidConfigError, match="No supported gpu backend found"):
        select(manager(), accelerator="gpu")
