"""Selecting "mps", "gpu" and "auto" on an Apple silicon Mac, and refusing multi-process strategies there.

This machine is not a Mac: tests that need one patch ``is_available``, the plugin's one probe function
(hardware this machine lacks); everything else is real.
"""

from __future__ import annotations

import platform
from typing import Any, cast

import pytest
import torch

from fabric_core._fabric.assembly import build
from fabric_core._kernel.context import SelectionContext
from fabric_core._kernel.manager import PluginManager, plugin_module
from fabric_core._kernel.selection import Selection, select
from fabric_core.errors import InvalidConfigError
from fabric_core.testing import make_manager
from fabric_core_mps import _plugin, device
from fabric_core_mps.accelerator import MPSAccelerator

PARALLEL = "fabric_core.strategies.parallel:ParallelStrategy"


@pytest.fixture
def mac(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend this is an Apple silicon Mac with MPS."""
    monkeypatch.setattr(device, "is_available", lambda: True)


def strategies(*names: str) -> tuple[str, Any]:
    """Register ``names`` as multi-process strategies (ParallelStrategy), like the ddp/fsdp/deepspeed plugins."""

    def register(registry: Any) -> None:
        for name in names:
            registry.add(name, PARALLEL, description="a parallel strategy")

    return "parallel", plugin_module("parallel", {"fabric_core_register_strategies": register})


def manager(*extra: Any) -> PluginManager:
    return make_manager(("mps", _plugin), *extra)


def choose(**kwargs: Any) -> Selection:
    return select(manager(), **kwargs)


# --- the probe --------------------------------------------------------------------------------------


def test_this_linux_machine_has_no_mps() -> None:
    assert device.is_available() is False
    assert MPSAccelerator.is_available() is False


def test_the_probe_needs_darwin_on_arm64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert device.is_available() is False  # an Intel Mac
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert device.is_available() is True
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert device.is_available() is False  # a torch built without MPS


@pytest.mark.parametrize(("value", "available"), [("1", False), ("0", True), (" 1 ", False), ("", True)])
def test_disable_mps_turns_it_off(monkeypatch: pytest.MonkeyPatch, value: str, available: bool) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    monkeypatch.setenv("DISABLE_MPS", value)
    assert device.is_available() is available


# --- selection --------------------------------------------------------------------------------------------


def test_mps_is_one_device_with_a_single_process(mac: None) -> None:
    selection = choose(accelerator="mps")
    ctx = selection.context
    assert (ctx.accelerator, ctx.device_type, ctx.strategy) == ("mps", "mps", "single_device")
    assert ctx.parallel_devices == (torch.device("mps", 0),)
    assert isinstance(build(selection).accelerator, MPSAccelerator)


@pytest.mark.parametrize("devices", [1, -1, "1", "-1", "0,", [0], "auto"])
def test_every_way_to_ask_for_the_one_device(mac: None, devices: Any) -> None:
    assert choose(accelerator="mps", devices=devices).context.parallel_devices == (torch.device("mps", 0),)


@pytest.mark.parametrize(
    ("devices", "pattern"),
    [
        (2, r"devices=2.*mps device\(s\) \[0, 1\], but your machine only has: \[0\]"),
        ([1], r"only has: \[0\]"),
        ([0, 0], r"must be unique"),
        (1.0, r"must be an int, a string, a sequence of ints"),
    ],
)
def test_more_than_the_one_device_is_an_error(mac: None, devices: Any, pattern: str) -> None:
    with pytest.raises(InvalidConfigError, match=pattern):
        choose(accelerator="mps", devices=devices)


def test_gpu_means_mps_on_a_mac(mac: None) -> None:
    selection = choose(accelerator="gpu")
    assert selection.context.accelerator == "mps"
    assert selection.decisions[0].hook == "mps.fabric_core_select_accelerator"


def test_gpu_is_left_to_others_without_mps() -> None:
    context = SelectionContext(catalog=manager().catalog)
    assert _plugin.fabric_core_select_accelerator("gpu", context) is None
    assert _plugin.fabric_core_select_accelerator("cuda", cast(Any, None)) is None


def test_gpu_asks_the_class_at_lightnings_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's tests pretend a Mac by patching `MPSAccelerator.is_available`: "gpu" follows it.
    monkeypatch.setattr(MPSAccelerator, "is_available", staticmethod(lambda: True))
    assert _plugin.fabric_core_select_accelerator("gpu", SelectionContext(catalog=manager().catalog)) == "mps"


def test_auto_picks_mps_on_a_mac(mac: None) -> None:
    assert choose().context.accelerator == "mps"


def test_auto_is_the_cpu_elsewhere() -> None:
    assert choose().context.accelerator == "cpu"


def test_mps_elsewhere_names_the_accelerator_and_what_is_available() -> None:
    with pytest.raises(InvalidConfigError, match=r"`MPSAccelerator` can not run on your system.*\['cpu'\]"):
        choose(accelerator="mps")


def test_the_device_setup_checks_the_device_type() -> None:
    MPSAccelerator().setup_device(torch.device("mps", 0))
    with pytest.raises(InvalidConfigError, match="Device should be MPS, got cpu instead"):
        MPSAccelerator().setup_device(torch.device("cpu"))


# --- multi-process strategies on MPS ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ddp", "ddp_spawn", "dp", "deepspeed_stage_2", "fsdp", "my_parallel"])
def test_parallel_strategies_are_refused_on_mps(mac: None, name: str) -> None:
    with pytest.raises(InvalidConfigError, match="strategies from the DDP family are not supported on the MPS") as info:
        select(manager(strategies(name)), accelerator="mps", strategy=name)
    assert f"strategy={name!r}" in str(info.value)
    assert "accelerator='cpu'" in str(info.value)


def test_a_parallel_strategy_instance_is_refused_on_mps(mac: None) -> None:
    from fabric_core.strategies.parallel import ParallelStrategy

    with pytest.raises(InvalidConfigError, match="DDP family"):
        choose(accelerator="mps", strategy=ParallelStrategy())


def test_a_ddp_named_single_process_strategy_is_refused_too(mac: None) -> None:
    def register(registry: Any) -> None:
        registry.add("dp", "fabric_core.strategies.single_device:SingleDeviceStrategy", description="like dp")

    with pytest.raises(InvalidConfigError, match="DDP family"):
        select(
            manager(("dp", plugin_module("dp", {"fabric_core_register_strategies": register}))),
            accelerator="mps",
            strategy="dp",
        )


def test_single_device_on_mps_is_fine(mac: None) -> None:
    assert choose(accelerator="mps", strategy="single_device").context.strategy == "single_device"


def test_parallel_strategies_on_the_cpu_of_a_mac_are_fine(mac: None) -> None:
    selection = select(manager(strategies("ddp")), accelerator="cpu", strategy="ddp")
    assert (selection.context.accelerator, selection.context.strategy) == ("cpu", "ddp")
