"""Selecting "cuda", "gpu" and "auto", and parsing ``devices``, on machines with and without GPUs.

This machine has no GPU: each test says how many it has by patching ``num_cuda_devices`` at Lightning's path
(``accelerators.cuda``), the one name the probe, the accelerator and device parsing ask. Nothing else is
faked; selection, parsing and the built objects are real.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fabric_core._fabric.assembly import build
from fabric_core._kernel.manager import PluginManager, plugin_module
from fabric_core._kernel.selection import Selection, select
from fabric_core.errors import InvalidConfigError, UnknownNameError
from fabric_core.testing import make_manager
from fabric_core_cuda import _plugin, accelerator
from fabric_core_cuda.accelerator import CUDAAccelerator


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Pretend this machine has ``n`` visible CUDA devices."""

    def set_count(n: int) -> None:
        monkeypatch.setattr(accelerator, "num_cuda_devices", lambda: n)

    return set_count


def manager(*extra: Any) -> PluginManager:
    return make_manager(("cuda", _plugin), *extra)


def choose(**kwargs: Any) -> Selection:
    return select(manager(), **kwargs)


def fake_mps(available: bool) -> tuple[str, Any]:
    """A stand-in "mps" accelerator, so these tests do not depend on the mps plugin being installed."""
    probe = "fabric_core.accelerators.cpu:CPUAccelerator.is_available" if available else "builtins:bool"

    def register(registry: Any) -> None:
        registry.add("mps", "fabric_core.accelerators.cpu:CPUAccelerator", description="fake", priority=20, probe=probe)

    return "fakemps", plugin_module("fakemps", {"fabric_core_register_accelerators": register})


# --- the probe --------------------------------------------------------------------------------------


def test_this_machine_has_no_cuda_and_the_probe_creates_no_context() -> None:
    assert accelerator.num_cuda_devices() == 0
    assert accelerator.is_cuda_available() is False
    assert CUDAAccelerator.is_available() is False
    assert not torch.cuda.is_initialized()  # type: ignore[no-untyped-call]


def test_the_probe_counts_through_nvml_before_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 3)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: pytest.fail("would create a CUDA context"))
    assert accelerator.num_cuda_devices() == 3


def test_the_probe_falls_back_to_the_runtime_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: -1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert accelerator.num_cuda_devices() == 2


def test_the_probe_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise OSError("libnvidia-ml.so: cannot open shared object file")

    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", broken)
    assert accelerator.num_cuda_devices() == 0


# --- accelerator="cuda" / "gpu" / "auto" ------------------------------------------------------------------


def test_cuda_with_one_gpu_is_a_single_device_on_cuda_0(gpus: Callable[[int], None]) -> None:
    gpus(1)
    selection = choose(accelerator="cuda")
    ctx = selection.context
    assert (ctx.accelerator, ctx.device_type, ctx.strategy) == ("cuda", "cuda", "single_device")
    assert ctx.parallel_devices == (torch.device("cuda", 0),)
    built = build(selection)
    assert isinstance(built.accelerator, CUDAAccelerator)
    assert built.accelerator.process_group_backend == "nccl"
    assert built.strategy.root_device == torch.device("cuda", 0)


def test_gpu_means_cuda_where_cuda_is_available(gpus: Callable[[int], None]) -> None:
    gpus(2)
    selection = choose(accelerator="gpu", devices=[1])
    assert selection.context.accelerator == "cuda"
    assert selection.context.parallel_devices == (torch.device("cuda", 1),)
    decision = selection.decisions[0]
    assert decision.reason == "'gpu' resolved to 'cuda'"
    assert decision.hook == "cuda.fabric_core_select_accelerator"


def test_gpu_prefers_an_available_mps(gpus: Callable[[int], None]) -> None:
    gpus(1)
    assert select(manager(fake_mps(available=True)), accelerator="gpu").context.accelerator == "mps"
    assert select(manager(fake_mps(available=False)), accelerator="gpu").context.accelerator == "cuda"


def test_gpu_without_any_gpu_says_what_is_available_and_how_to_get_one(gpus: Callable[[int], None]) -> None:
    gpus(0)
    with pytest.raises(InvalidConfigError, match="No supported gpu backend found!") as info:
        choose(accelerator="gpu")
    message = str(info.value)
    assert "Available accelerators: cpu" in message
    assert "pip install fabric-core-mps" in message
    assert "nvidia-smi" in message
    assert info.value.argument == "accelerator"
    with pytest.raises(InvalidConfigError, match="No supported gpu backend") as info:
        select(manager(fake_mps(available=False)), accelerator="gpu")
    assert "fabric-core-mps" not in str(info.value)


def test_cuda_without_a_gpu_names_the_accelerator_and_what_is_available(gpus: Callable[[int], None]) -> None:
    gpus(0)
    with pytest.raises(InvalidConfigError, match=r"`CUDAAccelerator` can not run on your system.*\['cpu'\]"):
        choose(accelerator="cuda")


def test_auto_picks_cuda_when_a_gpu_is_visible(gpus: Callable[[int], None]) -> None:
    gpus(1)
    selection = choose()
    assert selection.context.accelerator == "cuda"
    assert selection.context.parallel_devices == (torch.device("cuda", 0),)


def test_auto_falls_back_to_cpu_without_a_gpu(gpus: Callable[[int], None]) -> None:
    gpus(0)
    assert choose().context.accelerator == "cpu"


def test_auto_devices_means_every_gpu(gpus: Callable[[int], None]) -> None:
    gpus(3)
    assert CUDAAccelerator.auto_device_count() == 3
    # Three processes need a multi-process strategy, which this test's manager does not have.
    with pytest.raises(InvalidConfigError, match="strategy for 3 processes"):
        choose(accelerator="cuda")


def test_auto_devices_is_one_gpu_in_an_interactive_session(
    gpus: Callable[[int], None], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gpus(4)
    # Lightning's flag at Lightning's path (set at import from `sys.ps1`), where the accelerator reads it.
    monkeypatch.setattr("fabric_core.utilities.imports._IS_INTERACTIVE", True)
    with caplog.at_level("INFO"):
        assert CUDAAccelerator.auto_device_count() == 1
    assert "uses 1 of the 4 visible GPUs" in caplog.text


# --- precision on cuda ------------------------------------------------------------------------------------


def test_16_mixed_on_cuda_autocasts_on_cuda_with_a_cuda_grad_scaler(gpus: Callable[[int], None]) -> None:
    gpus(1)
    selection = choose(accelerator="cuda", precision="16-mixed")
    assert selection.precision.options == {"device": "cuda"}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.cuda.amp.GradScaler is enabled, but CUDA is not available")
        precision = build(selection).precision
    assert (type(precision).__name__, precision.precision, precision.device) == ("MixedPrecision", "16-mixed", "cuda")
    assert precision.scaler is not None
    assert precision.scaler._device == "cuda"


def test_bf16_mixed_on_cuda_has_no_scaler(gpus: Callable[[int], None]) -> None:
    gpus(1)
    precision = build(choose(accelerator="cuda", precision="bf16-mixed")).precision
    assert (precision.device, precision.scaler) == ("cuda", None)


# --- devices ------------------------------------------------------------------------------------------------

GOOD_DEVICES: list[tuple[Any, int, list[int]]] = [
    (1, 1, [0]),
    (2, 2, [0, 1]),
    (3, 4, [0, 1, 2]),
    (-1, 3, [0, 1, 2]),
    ("-1", 2, [0, 1]),
    ("2", 2, [0, 1]),
    ("0,1", 2, [0, 1]),
    ("1, 3", 4, [1, 3]),
    ("2,", 3, [2]),
    ([0, 1], 2, [0, 1]),
    ([1], 2, [1]),
    ((2, 0), 3, [2, 0]),
]


@pytest.mark.parametrize(("devices", "count", "expected"), GOOD_DEVICES, ids=[repr(g[0]) for g in GOOD_DEVICES])
def test_device_forms_parse_like_lightning(
    gpus: Callable[[int], None], devices: Any, count: int, expected: list[int]
) -> None:
    gpus(count)
    assert CUDAAccelerator.parse_devices(devices) == expected
    assert CUDAAccelerator.get_parallel_devices(devices) == [torch.device("cuda", i) for i in expected]


def test_selected_devices_become_the_parallel_devices(gpus: Callable[[int], None]) -> None:
    gpus(4)
    ddp = pytest.importorskip("fabric_core_ddp._plugin")
    selection = select(manager(("ddp", ddp)), accelerator="cuda", devices="3", strategy="ddp")
    assert selection.context.parallel_devices == tuple(torch.device("cuda", i) for i in range(3))
    # A one-device strategy would use only the first of them: refused, naming the devices asked for.
    with pytest.raises(InvalidConfigError, match=r"strategy='single_device', devices=3"):
        choose(accelerator="cuda", devices="3", strategy="single_device")


BAD_DEVICES: list[tuple[Any, int, str]] = [
    (3, 2, r"devices=3.*requested cuda device\(s\) \[0, 1, 2\], but your machine only has: \[0, 1\]"),
    ([0, 4], 2, r"only has: \[0, 1\]"),
    ("1,5", 2, r"devices='1,5'.*only has: \[0, 1\]"),
    ([-2], 2, r"only has"),
    (-1, 0, r"devices=-1.*GPUs requested but none are available"),
    (2, 0, r"only has: \[\]"),
    ([0, 0], 2, r"devices=\[0, 0\].*must be unique.*\[0\]"),
    ("1,1", 2, r"must be unique"),
    (0, 2, r"devices=0.*not a valid input using cuda accelerator"),
    ("0", 2, r"not a valid input"),
    ([], 2, r"devices=\[\].*not a valid input"),
    (-2, 2, r"devices=-2.*not a valid number of cuda devices.*-1 \(all of them\)"),
    (1.5, 2, r"devices=1.5.*must be an int, a string, a sequence of ints, but you passed a float"),
    (True, 2, r"devices=True"),
    (None, 2, r"devices=None.*NoneType"),
    (["0", "1"], 2, r"sequence containing str \('0'\)"),
    ([0, 1.0], 2, r"sequence containing float"),
    ("gpu0", 2, r"devices='gpu0'.*not a valid device string"),
    ("0,x", 2, r"not a valid device string"),
]


@pytest.mark.parametrize(("devices", "count", "pattern"), BAD_DEVICES, ids=[repr(b[0]) for b in BAD_DEVICES])
def test_bad_devices_name_the_value_and_the_valid_forms(
    gpus: Callable[[int], None], devices: Any, count: int, pattern: str
) -> None:
    gpus(count)
    with pytest.raises(InvalidConfigError, match=pattern) as info:
        CUDAAccelerator.parse_devices(devices)
    assert info.value.argument == "devices"


@pytest.mark.parametrize("devices", [3, "0,7", [5], [1, 1], -2])
def test_bad_devices_are_rejected_by_selection_too(gpus: Callable[[int], None], devices: Any) -> None:
    gpus(2)
    with pytest.raises(InvalidConfigError, match=r"Fabric\(devices="):
        choose(accelerator="cuda", devices=devices)


def test_without_the_plugin_cuda_is_unknown_with_the_install_command() -> None:
    with pytest.raises(UnknownNameError, match="pip install fabric-core-cuda"):
        select(make_manager(), accelerator="cuda")
