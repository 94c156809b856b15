"""Lightning's private names of the XLA modules, called with the same inputs on both packages.

torch_xla is not installed here. Where a helper imports it, a stand-in module tree records what the helper
asked of it; both packages get the same stand-in.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
import sys
import typing
from collections.abc import Callable, Iterator
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

import pytest
import torch

import fabric_core.accelerators.xla as ours
import fabric_core.strategies.launchers.xla as our_launcher
import fabric_core.strategies.xla_fsdp as our_fsdp
from fabric_core_xla import device

lightning = pytest.importorskip("lightning_fabric.accelerators.xla")
lightning_fsdp = importlib.import_module("lightning_fabric.strategies.xla_fsdp")
lightning_launcher = importlib.import_module("lightning_fabric.strategies.launchers.xla")

BOTH_FSDP = pytest.mark.parametrize("module", [lightning_fsdp, our_fsdp], ids=["lightning", "fabric_core"])

PATHS = {
    "accelerators.xla": [
        "_XLA_AVAILABLE", "_XLA_GREATER_EQUAL_2_1", "_XLA_GREATER_EQUAL_2_5", "_using_pjrt", "_parse_tpu_devices",
        "_check_tpu_devices_valid", "_parse_tpu_devices_str",
    ],
    "strategies.xla_fsdp": [
        "_POLICY_SET", "_POLICY", "_auto_wrap_policy_kwargs", "_activation_checkpointing_auto_wrapper",
        "_activation_checkpointing_kwargs", "_XLAFSDPBackwardSyncControl",
    ],
    "strategies.launchers.xla": ["_XLALauncher", "_rank_teardown"],
    "plugins.precision.xla": ["_PRECISION_INPUT"],
    "plugins.environments.xla": ["log"],
    "plugins.io.xla": ["log"],
}  # fmt: skip


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_name_lightning_defines_is_at_its_path(path: str) -> None:
    module = importlib.import_module(f"fabric_core.{path}")
    assert [name for name in PATHS[path] if not hasattr(module, name)] == []
    # Lightning's own module defines the same names (this list is not made up).
    theirs = importlib.import_module(f"lightning_fabric.{path}")
    assert [name for name in PATHS[path] if not hasattr(theirs, name)] == []


def test_names_import_as_real_code_writes_them() -> None:
    from fabric_core.strategies.launchers import _XLALauncher
    from fabric_core.strategies.xla_fsdp import _activation_checkpointing_auto_wrapper
    from fabric_core_xla.fsdp import checkpointing_wrapper
    from fabric_core_xla.launcher import XLALauncher

    assert _XLALauncher is XLALauncher is our_launcher._XLALauncher
    assert _activation_checkpointing_auto_wrapper is checkpointing_wrapper
    assert isinstance(importlib.import_module("fabric_core.plugins.environments.xla").log, logging.Logger)


def test_the_availability_flags_agree_without_torch_xla() -> None:
    for name in ("_XLA_AVAILABLE", "_XLA_GREATER_EQUAL_2_1", "_XLA_GREATER_EQUAL_2_5"):
        assert bool(getattr(ours, name)) is bool(getattr(lightning, name)) is False
    assert "torch_xla" in str(ours._XLA_AVAILABLE)


def test_importing_the_lightning_paths_does_not_import_torch_xla() -> None:
    assert "torch_xla" not in sys.modules


@pytest.fixture
def fake_torch_xla(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """``fake("torch_xla.a.b")`` puts stand-in modules for the whole dotted path into ``sys.modules``."""

    def fake(path: str) -> ModuleType:
        parts = path.split(".")
        parent: ModuleType | None = None
        for i in range(len(parts)):
            name = ".".join(parts[: i + 1])
            module = sys.modules.get(name)
            if module is None:
                module = ModuleType(name)
                module.__spec__ = ModuleSpec(name, None)
                monkeypatch.setitem(sys.modules, name, module)
                if parent is not None:
                    setattr(parent, parts[i], module)
            parent = module
        assert parent is not None
        return parent

    return fake


# -- accelerators.xla ---------------------------------------------------------------------------------------


def test_using_pjrt_without_torch_xla_is_a_missing_module() -> None:
    for module in (lightning, ours):
        with pytest.raises(ModuleNotFoundError, match="torch_xla"):
            module._using_pjrt()


@pytest.mark.parametrize("pjrt", [True, False])
def test_using_pjrt_asks_torch_xla(fake_torch_xla: Callable[[str], ModuleType], pjrt: bool) -> None:
    # No distribution metadata for the stand-in: both take the branch for torch_xla before 2.1.
    fake_torch_xla("torch_xla.experimental.pjrt").using_pjrt = lambda: pjrt
    assert lightning._using_pjrt() is ours._using_pjrt() is pjrt


@pytest.mark.parametrize("text", ["8", " 1 ", "0,", "1,2", "3, 4", ",2", "", "-1"])
def test_device_strings_parse_the_same(text: str) -> None:
    assert ours._parse_tpu_devices_str(text) == lightning._parse_tpu_devices_str(text)


@pytest.mark.parametrize("text", ["a", "1,a", "1.5", "0, ,1", "auto"])
def test_unparsable_device_strings_are_value_errors(text: str) -> None:
    for module in (lightning, ours):
        with pytest.raises(ValueError, match=re.escape(repr(text))):
            module._parse_tpu_devices_str(text)


@pytest.fixture
def host_devices(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Pretend this host has ``n`` XLA devices, for both packages."""

    def set_count(n: int) -> None:
        monkeypatch.setattr(device, "num_xla_devices", lambda: n)
        monkeypatch.setattr(lightning.XLAAccelerator, "auto_device_count", staticmethod(lambda: n))

    return set_count


CANDIDATES = [1, 2, 4, 8, -1, 0, [0], [3], [4], [0, 1], (1,), [-1], []]


@pytest.mark.parametrize("count", [1, 4, 8])
@pytest.mark.parametrize("devices", CANDIDATES, ids=repr)
def test_the_same_devices_are_valid(host_devices: Callable[[int], None], count: int, devices: Any) -> None:
    host_devices(count)
    outcomes = []
    for module in (lightning, ours):
        try:
            module._check_tpu_devices_valid(devices)
            outcomes.append("ok")
        except ValueError as err:
            assert f"can only be 'auto', 1, {count} or [<0-{count - 1}>] for TPUs" in str(err)
            outcomes.append("rejected")
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("devices", [1, "1", 4, "4", [2], "2,", " 4 "], ids=repr)
def test_devices_parse_the_same(host_devices: Callable[[int], None], devices: Any) -> None:
    host_devices(4)
    assert ours._parse_tpu_devices(devices) == lightning._parse_tpu_devices(devices)


@pytest.mark.parametrize(
    ("devices", "error"),
    [(1.5, TypeError), (None, TypeError), ([True], TypeError), (["0"], TypeError), ("x", ValueError), (2, ValueError)],
    ids=repr,
)
def test_bad_devices_fail_the_same_way(host_devices: Callable[[int], None], devices: Any, error: type) -> None:
    host_devices(4)
    for module in (lightning, ours):
        with pytest.raises(error):
            module._parse_tpu_devices(devices)


# -- strategies.xla_fsdp ------------------------------------------------------------------------------------


def test_the_policy_types_are_lightnings() -> None:
    assert our_fsdp._POLICY_SET == lightning_fsdp._POLICY_SET == set[type[torch.nn.Module]]

    # typing.Callable and collections.abc.Callable differ only as objects: compare what they are made of.
    def parts(alias: Any) -> set[Any]:
        return {(typing.get_origin(a), repr(typing.get_args(a))) for a in typing.get_args(alias)}

    assert parts(our_fsdp._POLICY) == parts(lightning_fsdp._POLICY)
    assert len(parts(our_fsdp._POLICY)) == 2


@BOTH_FSDP
def test_no_policy_leaves_the_kwargs_alone(module: ModuleType) -> None:
    kwargs = {"compute_dtype": torch.bfloat16}
    assert module._auto_wrap_policy_kwargs(None, kwargs) is kwargs
    assert kwargs == {"compute_dtype": torch.bfloat16}


@BOTH_FSDP
def test_a_callable_policy_is_passed_as_it_is(module: ModuleType) -> None:
    def policy(module: torch.nn.Module, recurse: bool, unwrapped_params: int) -> bool:
        return recurse

    kwargs: dict[str, Any] = {}
    assert module._auto_wrap_policy_kwargs(policy, kwargs) is kwargs
    assert kwargs == {"auto_wrap_policy": policy}


def test_a_set_policy_wraps_those_classes(fake_torch_xla: Callable[[str], ModuleType]) -> None:
    def transformer_auto_wrap_policy(**kwargs: Any) -> bool:
        return True

    fake_torch_xla("torch_xla.distributed.fsdp.wrap").transformer_auto_wrap_policy = transformer_auto_wrap_policy
    made = [
        module._auto_wrap_policy_kwargs({torch.nn.Linear}, {})["auto_wrap_policy"]
        for module in (lightning_fsdp, our_fsdp)
    ]
    for policy in made:
        assert isinstance(policy, functools.partial) and policy.func is transformer_auto_wrap_policy
    assert made[0].keywords == made[1].keywords == {"transformer_layer_cls": {torch.nn.Linear}}


@BOTH_FSDP
@pytest.mark.parametrize("policy", [None, set()])
def test_no_checkpointing_policy_leaves_the_kwargs_alone(module: ModuleType, policy: Any) -> None:
    kwargs = {"auto_wrapper_callable": print}
    assert module._activation_checkpointing_kwargs(policy, kwargs) is kwargs
    assert kwargs == {"auto_wrapper_callable": print}


@BOTH_FSDP
def test_a_checkpointing_policy_binds_the_checkpointing_wrapper(module: ModuleType) -> None:
    kwargs: dict[str, Any] = {"flatten_parameters": True}
    assert module._activation_checkpointing_kwargs({torch.nn.Linear}, kwargs) is kwargs
    wrapper = kwargs["auto_wrapper_callable"]
    assert wrapper.func is module._activation_checkpointing_auto_wrapper
    assert wrapper.args == ({torch.nn.Linear},)
    assert kwargs["flatten_parameters"] is True


@BOTH_FSDP
def test_checkpointing_and_a_wrapper_callable_of_ones_own_conflict(module: ModuleType) -> None:
    with pytest.raises(ValueError, match=r"auto_wrapper_callable.*activation_checkpointing_policy"):
        module._activation_checkpointing_kwargs({torch.nn.Linear}, {"auto_wrapper_callable": print})


@BOTH_FSDP
def test_a_checkpointing_policy_must_be_a_set(module: ModuleType) -> None:
    with pytest.raises(TypeError, match=r"`activation_checkpointing_policy` must be a set"):
        module._activation_checkpointing_kwargs([torch.nn.Linear], {})


@pytest.fixture
def fake_xla_fsdp(fake_torch_xla: Callable[[str], ModuleType]) -> ModuleType:
    """A stand-in for ``torch_xla.distributed.fsdp``: the wrapper records its arguments, checkpointing marks."""

    class XlaFullyShardedDataParallel(torch.nn.Module):
        def __init__(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            super().__init__()
            self.inner, self.args, self.kwargs = module, args, kwargs
            self.synced = True

        def no_sync(self) -> Any:
            return ("no_sync", self)

    fsdp = fake_torch_xla("torch_xla.distributed.fsdp")
    fsdp.XlaFullyShardedDataParallel = XlaFullyShardedDataParallel
    fsdp.checkpoint_module = lambda module: torch.nn.Sequential(module)  # recognisable: a Sequential around it
    return fsdp


@BOTH_FSDP
def test_the_checkpointing_wrapper_checkpoints_the_policy_classes_only(
    module: ModuleType, fake_xla_fsdp: ModuleType
) -> None:
    linear, relu = torch.nn.Linear(2, 2), torch.nn.ReLU()
    wrapped = module._activation_checkpointing_auto_wrapper({torch.nn.Linear}, linear, 7, compute_dtype="bf16")
    assert isinstance(wrapped, fake_xla_fsdp.XlaFullyShardedDataParallel)
    assert isinstance(wrapped.inner, torch.nn.Sequential) and wrapped.inner[0] is linear
    assert wrapped.args == (7,) and wrapped.kwargs == {"compute_dtype": "bf16"}
    plain = module._activation_checkpointing_auto_wrapper({torch.nn.Linear}, relu)
    assert plain.inner is relu


@BOTH_FSDP
def test_backward_sync_control(module: ModuleType, fake_xla_fsdp: ModuleType) -> None:
    control = module._XLAFSDPBackwardSyncControl()
    linear = torch.nn.Linear(2, 2)
    with control.no_backward_sync(linear, enabled=False):
        pass
    with pytest.raises(TypeError, match=r"XlaFullyShardedDataParallel.*Linear"):
        control.no_backward_sync(linear, enabled=True)
    wrapped = fake_xla_fsdp.XlaFullyShardedDataParallel(linear)
    assert control.no_backward_sync(wrapped, enabled=True) == ("no_sync", wrapped)


def test_the_xla_fsdp_strategy_controls_backward_sync_with_it(
    fake_xla_fsdp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabric_core_xla import environment, fsdp
    from fabric_core_xla.fsdp import XLAFSDPBackwardSyncControl, XLAFSDPStrategy

    # What Lightning's `mock_xla_available` does: the flag at each path the strategy's construction reads.
    for module in (fsdp, environment):
        monkeypatch.setattr(module, "_XLA_AVAILABLE", True)
    strategy = XLAFSDPStrategy()
    assert isinstance(strategy.backward_sync_control, XLAFSDPBackwardSyncControl)


# -- strategies.launchers.xla -------------------------------------------------------------------------------


@pytest.fixture
def rendezvous(fake_torch_xla: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    calls: list[Any] = []
    fake_torch_xla("torch_xla.core.xla_model").rendezvous = lambda tag: calls.append(("rendezvous", tag))
    monkeypatch.setattr("time.sleep", lambda seconds: calls.append(("sleep", seconds)))
    yield calls


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_rank_teardown_waits_for_all_then_lets_rank_0_leave_last(rendezvous: list[Any], rank: int) -> None:
    seen = []
    for module in (lightning_launcher, our_launcher):
        rendezvous.clear()
        module._rank_teardown(rank)
        seen.append([kind for kind, _ in rendezvous])
    assert seen[0] == seen[1] == (["rendezvous", "sleep"] if rank == 0 else ["rendezvous"])
