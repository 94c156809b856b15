"""The XLA classes against Lightning's, with torch_xla pretended as Lightning's tests pretend it.

Lightning's ``mock_xla_available`` sets ``_XLA_AVAILABLE`` at seven of its module paths and puts stand-ins for
torch_xla in ``sys.modules``; ``mock_tpu_available`` also patches ``XLAAccelerator.is_available`` and
``auto_device_count``. Each module of this plugin reads its own flag at call time, so the same patches work
on both packages, and each case compares what both do.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("lightning_fabric")

from tests.lightning_side_by_side import PACKAGES, XLA_FLAGS, module, pretend_xla


@pytest.fixture
def xla(monkeypatch: pytest.MonkeyPatch) -> Callable[[int | None], None]:
    """Pretend torch_xla on both packages; with a count, that many devices too (``mock_tpu_available``)."""
    return lambda devices=None: pretend_xla(monkeypatch, devices)


def errors(call: Callable[[str], Any]) -> list[BaseException]:
    found = []
    for package in PACKAGES:
        with pytest.raises(Exception) as info:  # compared below
            call(package)
        found.append(info.value)
    return found


@pytest.mark.parametrize(
    ("devices", "error", "phrase"),
    [
        (0, ValueError, "devices` can only be"),
        (5, ValueError, "devices` can only be"),
        ("anything-else", ValueError, "Could not parse the selected TPU devices: 'anything-else'"),
    ],
)
def test_bad_tpu_devices_in_lightnings_words(
    xla: Callable[[int | None], None], devices: Any, error: type[Exception], phrase: str
) -> None:
    xla(8)
    for raised in errors(lambda p: module(p, "accelerators.xla").XLAAccelerator.get_parallel_devices(devices)):
        assert isinstance(raised, error) and phrase in str(raised), raised


@pytest.mark.parametrize("devices", [1, 8, [3]])
def test_tpu_devices_become_the_same_parallel_devices(xla: Callable[[int | None], None], devices: Any) -> None:
    xla(8)
    made = [module(p, "accelerators.xla").XLAAccelerator.get_parallel_devices(devices) for p in PACKAGES]
    assert made[0] == made[1]


@pytest.mark.parametrize("available", [True, False])
def test_the_environment_is_detected_where_the_accelerator_is_available(
    monkeypatch: pytest.MonkeyPatch, available: bool
) -> None:
    for package in PACKAGES:
        monkeypatch.setattr(module(package, "accelerators.xla").XLAAccelerator, "is_available", lambda: available)
    assert [module(p, "plugins.environments").XLAEnvironment.detect() for p in PACKAGES] == [available] * 2


@pytest.mark.parametrize("precision", ["16", "16-mixed", "bf16-mixed", "64-true"])
def test_the_xla_precision_refuses_in_lightnings_words(xla: Callable[[int | None], None], precision: str) -> None:
    xla()
    for raised in errors(lambda p: module(p, "plugins").XLAPrecision(precision)):
        assert isinstance(raised, ValueError)
        assert f"`precision={precision!r})` is not supported in XLA" in str(raised)


@pytest.mark.parametrize(
    ("precision", "dtype", "variable"),
    [
        ("32-true", torch.float32, None),
        ("16-true", torch.float16, "XLA_USE_F16"),
        ("bf16-true", torch.bfloat16, "XLA_USE_BF16"),
    ],
)
def test_the_xla_precisions_dtype_and_variables(
    xla: Callable[[int | None], None], precision: str, dtype: torch.dtype, variable: str | None
) -> None:
    xla()
    for package in PACKAGES:
        plugin = module(package, "plugins").XLAPrecision(precision)
        assert plugin._desired_dtype is dtype
        assert (os.environ.get(variable) == "1") if variable else True
        plugin.teardown()
        assert variable is None or variable not in os.environ


def test_without_torch_xla_every_component_refuses_as_lightnings() -> None:
    # No flag patched: torch_xla is absent here, and each class says so with a ModuleNotFoundError.
    calls: list[Callable[[str], Any]] = [
        lambda p: module(p, "accelerators.xla").XLAAccelerator(),
        lambda p: module(p, "plugins.environments").XLAEnvironment(),
        lambda p: module(p, "plugins").XLAPrecision("32-true"),
        lambda p: module(p, "plugins.io").XLACheckpointIO(),
        lambda p: module(p, "strategies").SingleDeviceXLAStrategy(device=0),
        lambda p: module(p, "strategies").XLAFSDPStrategy(),
    ]
    for call in calls:
        for raised in errors(call):
            assert isinstance(raised, ModuleNotFoundError) and "torch_xla" in str(raised)


def test_the_fsdp_wrappers_arguments(xla: Callable[[int | None], None]) -> None:
    xla()
    for package in PACKAGES:
        strategies, plugins = module(package, "strategies"), module(package, "plugins")
        kwargs = strategies.XLAFSDPStrategy(auto_wrap_policy={torch.nn.Linear})._parse_fsdp_kwargs()
        assert set(kwargs) == {"auto_wrap_policy", "compute_dtype"} and kwargs["compute_dtype"] is torch.float32
        bf16 = strategies.XLAFSDPStrategy(precision=plugins.XLAPrecision("bf16-true"), compute_dtype=torch.float16)
        assert bf16._parse_fsdp_kwargs()["compute_dtype"] is torch.float16  # the user's own wins
        bf16.precision.teardown()
        both = strategies.XLAFSDPStrategy(activation_checkpointing_policy={torch.nn.Linear}, auto_wrapper_callable=1)
        with pytest.raises(ValueError, match="cannot set both"):
            both._parse_fsdp_kwargs()
        with pytest.raises(TypeError, match=re.escape("`activation_checkpointing_policy` must be a set")):
            strategies.XLAFSDPStrategy(activation_checkpointing_policy="foo")._parse_fsdp_kwargs()


@pytest.mark.parametrize("path", XLA_FLAGS)
def test_each_flag_is_the_requirement_itself_not_a_copy_of_a_patched_one(path: str) -> None:
    from fabric_core_xla.accelerator import XLA_AVAILABLE

    # Lightning's `mock_xla_available` patches the accelerator's flag first; a module imported after that binds
    # the accelerator's `XLA_AVAILABLE`, which no test patches, so it is not left believing torch_xla exists.
    assert module("fabric_core", path)._XLA_AVAILABLE is XLA_AVAILABLE


@pytest.mark.parametrize(
    ("method", "runtime_name"),
    [("world_size", "world_size"), ("global_rank", "global_ordinal"), ("local_rank", "local_ordinal")],
)
def test_the_environment_asks_the_runtime_once_as_lightnings(
    xla: Callable[[int | None], None], method: str, runtime_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lightning's *_from_xla_runtime_greater_2_1 tests: a cached answer (`.cache_clear()`), read from a stand-in
    # torch_xla package's `runtime` attribute.
    from unittest import mock

    xla(None)
    monkeypatch.setattr(module(PACKAGES[0], "plugins.environments.xla"), "_XLA_GREATER_EQUAL_2_1", True)
    for package in PACKAGES:
        environment = module(package, "plugins.environments").XLAEnvironment()
        with mock.patch(f"torch_xla.runtime.{runtime_name}", return_value=3) as asked:
            getattr(environment, method).cache_clear()
            assert getattr(environment, method)() == getattr(environment, method)() == 3
            asked.assert_called_once()
