"""Selecting the tpu accelerator, the XLA strategies and precisions, and the errors around them.

torch_xla is not installed here and there is no TPU: tests say how many XLA devices the host has by
patching ``num_xla_devices``, the plugin's one probe function. Selection itself is real (it imports the
plugin's classes but builds nothing, so torch_xla is never needed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from fabric_core._kernel.manager import PluginManager, plugin_module
from fabric_core._kernel.selection import Selection, select
from fabric_core.errors import InvalidConfigError
from fabric_core.testing import make_manager
from fabric_core_xla import _plugin, accelerator, device
from fabric_core_xla.accelerator import XLAAccelerator


@pytest.fixture
def tpus(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Pretend this host has ``n`` XLA devices."""

    def set_count(n: int) -> None:
        monkeypatch.setattr(device, "num_xla_devices", lambda: n)

    return set_count


def manager(*extra: Any) -> PluginManager:
    return make_manager(("xla", _plugin), *extra)


def choose(**kwargs: Any) -> Selection:
    return select(manager(), **kwargs)


def xla_devices(n: int) -> tuple[torch.device, ...]:
    return tuple(torch.device("xla", i) for i in range(n))


# --- the probe --------------------------------------------------------------------------------------


def test_without_torch_xla_there_is_no_xla_device() -> None:
    assert device.xla_installed() is False
    assert device.num_xla_devices() == 0
    assert device.is_available() is False


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PJRT_DEVICE": "CPU"}, 1),
        ({"PJRT_DEVICE": "cpu", "CPU_NUM_DEVICES": "4"}, 4),
        ({"PJRT_DEVICE": "CUDA", "GPU_NUM_DEVICES": "2"}, 2),
        ({"PJRT_DEVICE": "CUDA"}, 0),
        ({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "many"}, 0),
        ({"PJRT_DEVICE": "NEURON"}, 0),
    ],
)
def test_device_count_from_the_pjrt_environment(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: int
) -> None:
    # torch_xla's presence is the one thing these cases need besides the environment.
    monkeypatch.setattr(device, "xla_installed", lambda: True)
    for name in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "GPU_NUM_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert device.num_xla_devices() == expected


def test_counting_tpus_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "xla_installed", lambda: True)
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    # torch_xla._internal.tpu cannot be imported here: the probe answers 0 instead of raising.
    assert device.num_xla_devices() == 0


# --- accelerator and strategy -------------------------------------------------------------------------------


def test_several_devices_run_one_process_each_with_the_xla_strategy(tpus: Callable[[int], None]) -> None:
    tpus(4)
    selection = choose(accelerator="tpu")
    ctx = selection.context
    assert (ctx.accelerator, ctx.device_type, ctx.strategy) == ("tpu", "xla", "xla")
    assert ctx.parallel_devices == xla_devices(4)
    assert ctx.world_size == 4
    assert selection.precision.entry is not None and selection.precision.entry.name == "xla-32-true"
    assert [d.hook for d in selection.decisions if d.step == "strategy"] == ["xla.fabric_core_select_strategy"]


def test_one_device_runs_the_single_xla_strategy(tpus: Callable[[int], None]) -> None:
    tpus(8)
    ctx = choose(accelerator="tpu", devices=1).context
    assert (ctx.strategy, ctx.parallel_devices) == ("single_xla", xla_devices(1))


def test_a_chosen_device_index(tpus: Callable[[int], None]) -> None:
    tpus(8)
    ctx = choose(accelerator="tpu", devices=[5]).context
    assert (ctx.strategy, ctx.parallel_devices) == ("single_xla", (torch.device("xla", 5),))
    assert choose(accelerator="tpu", devices="3,").context.parallel_devices == (torch.device("xla", 3),)


def test_a_host_with_one_device_runs_single_xla_by_default(tpus: Callable[[int], None]) -> None:
    tpus(1)
    assert choose(accelerator="xla").context.strategy == "single_xla"


def test_xla_is_an_alias_of_tpu(tpus: Callable[[int], None]) -> None:
    tpus(4)
    assert choose(accelerator="xla").context.accelerator == "tpu"


def test_auto_prefers_xla_devices(tpus: Callable[[int], None]) -> None:
    tpus(4)
    assert choose().context.accelerator == "tpu"
    tpus(0)
    assert choose().context.accelerator == "cpu"


def test_fsdp_on_tpu_is_xla_fsdp(tpus: Callable[[int], None]) -> None:
    tpus(4)
    selection = choose(accelerator="tpu", strategy="fsdp")
    assert selection.context.strategy == "xla_fsdp"
    assert selection.decisions[-2].reason == "'fsdp' resolved to 'xla_fsdp'"
    assert selection.precision.entry is not None and selection.precision.entry.name == "xla-32-true"


@pytest.mark.parametrize(("devices", "expected"), [("auto", 4), (4, 4), ("4", 4), (1, 1), ([0], [0]), ([3], [3])])
def test_device_forms(tpus: Callable[[int], None], devices: Any, expected: Any) -> None:
    tpus(4)
    if devices != "auto":
        assert XLAAccelerator.parse_devices(devices) == expected
    assert XLAAccelerator.auto_device_count() == 4


@pytest.mark.parametrize("devices", [2, 8, -1, [0, 1], [4], "0,1", 1.0, True])
def test_bad_device_forms_name_the_value_and_the_valid_ones(tpus: Callable[[int], None], devices: Any) -> None:
    tpus(4)
    with pytest.raises(InvalidConfigError, match=r"can only be 'auto', 1, 4 or \[<0-3>\] for TPUs") as info:
        XLAAccelerator.parse_devices(devices)
    assert f"devices={devices!r}" in str(info.value)


def test_a_string_that_is_no_device_form_says_so_in_lightnings_words(tpus: Callable[[int], None]) -> None:
    tpus(4)
    with pytest.raises(InvalidConfigError, match=r"Could not parse the selected TPU devices: 'two'\. .*'auto'"):
        XLAAccelerator.parse_devices("two")


# --- precision ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "entry"), [(None, "xla-32-true"), ("16-true", "xla-16-true"), ("bf16-true", "xla-bf16-true")]
)
def test_precisions_map_to_the_xla_entries(tpus: Callable[[int], None], precision: Any, entry: str) -> None:
    tpus(4)
    for devices in (1, 4):
        selection = choose(accelerator="tpu", devices=devices, precision=precision)
        assert selection.precision.entry is not None and selection.precision.entry.name == entry
        assert selection.precision.options == {}  # XLAPrecision takes no device


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed", "64-true"])
def test_other_precisions_are_refused_with_the_valid_choices(tpus: Callable[[int], None], precision: str) -> None:
    tpus(4)
    with pytest.raises(InvalidConfigError, match="Valid choices: '32-true', '16-true', 'bf16-true'") as info:
        choose(accelerator="tpu", precision=precision)
    assert f"precision={precision!r}" in str(info.value)


def test_other_strategies_keep_their_precision(tpus: Callable[[int], None]) -> None:
    tpus(0)
    selection = choose(precision="bf16-true")
    assert selection.precision.entry is not None and selection.precision.entry.name == "bf16-true"


# --- combinations that cannot run ----------------------------------------------------------------------------


def test_a_non_xla_strategy_on_tpu_is_refused(tpus: Callable[[int], None]) -> None:
    tpus(4)
    with pytest.raises(InvalidConfigError, match=r"runs only with the XLA strategies, not `strategy='single_device'`"):
        choose(accelerator="tpu", devices=1, strategy="single_device")


def test_an_xla_strategy_off_tpu_is_refused(tpus: Callable[[int], None]) -> None:
    tpus(4)
    with pytest.raises(InvalidConfigError, match=r"`strategy='single_xla'` runs on XLA devices.*'cpu'"):
        choose(accelerator="cpu", strategy="single_xla")


def test_single_xla_on_several_devices_is_refused(tpus: Callable[[int], None]) -> None:
    tpus(4)
    with pytest.raises(InvalidConfigError, match=r"one process on one device, but 4 devices"):
        choose(accelerator="tpu", strategy="single_xla")


@pytest.mark.parametrize("strategy", ["xla", "xla_fsdp"])
def test_multi_process_xla_on_one_device_is_refused(tpus: Callable[[int], None], strategy: str) -> None:
    tpus(4)
    with pytest.raises(InvalidConfigError, match=r"needs more than one, but 1 was selected.*single_xla"):
        choose(accelerator="tpu", devices=1, strategy=strategy)


# --- without torch_xla, or without a device ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["tpu", "xla"])
def test_tpu_without_torch_xla_says_how_to_install_it(name: str) -> None:
    with pytest.raises(
        InvalidConfigError, match=r"needs torch_xla, which is not installed.*pip install torch_xla"
    ) as err:
        choose(accelerator=name)
    # Also what Lightning raises, for code that catches a missing package as such.
    assert isinstance(err.value, ModuleNotFoundError) and err.value.name == "torch_xla"


def test_tpu_with_torch_xla_but_no_device_names_what_is_available(
    tpus: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    tpus(0)
    monkeypatch.setattr(accelerator, "_XLA_AVAILABLE", True)  # Lightning's flag: where torch_xla's presence is read
    with pytest.raises(InvalidConfigError, match=r"`XLAAccelerator` can not run on your system.*\['cpu'\]"):
        choose(accelerator="tpu")


def test_a_third_party_accelerator_named_xla_type_devices_gets_the_xla_strategies(
    tpus: Callable[[int], None],
) -> None:
    """The strategy hooks look at the device type, not at this plugin's accelerator class."""
    tpus(4)

    def register(registry: Any) -> None:
        registry.add("mytpu", "fabric_core_xla.accelerator:XLAAccelerator", description="x", priority=0)

    other = ("mytpu", plugin_module("mytpu", {"fabric_core_register_accelerators": register}))
    assert select(manager(other), accelerator="mytpu").context.strategy == "xla"


def test_only_the_plain_xla_strategy_has_no_backward_sync_to_skip() -> None:
    # Its optimizer step reduces the gradients, so `fabric.no_backward_sync` is a silent no-op there, as in
    # Lightning; XLA FSDP has a control of its own.
    from fabric_core_xla.fsdp import XLAFSDPStrategy
    from fabric_core_xla.strategy import XLAStrategy

    assert XLAStrategy.backward_sync_is_noop and not XLAFSDPStrategy.backward_sync_is_noop
