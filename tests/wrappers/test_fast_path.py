"""The invariants of ``fabric_core.wrappers._fast_path`` (written at the top of that module), one test each.

The fast path calls the strategy's module's ``forward`` without ``Module.__call__`` where no hook could run;
each test here makes a hook or a context exist and checks that it still runs, or that the shortcut is taken.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

from fabric_core import Fabric
from fabric_core.precision.float_cast import Conversions, FloatCastPrecision, true_conversions
from fabric_core.testing import make_manager
from fabric_core.wrappers import FabricModule, StepPlan
from fabric_core.wrappers._fast_path import DIRECT_CALLS, CallState, checked_autocast


def setup(precision: str = "32-true") -> tuple[Fabric, FabricModule]:
    fabric = Fabric(accelerator="cpu", precision=precision, plugin_manager=make_manager())  # type: ignore[arg-type]
    return fabric, fabric.setup(nn.Linear(4, 2))


def call_state(model: FabricModule) -> CallState:
    state: CallState = model.__dict__["_call"]
    return state


class CountingForward(nn.Linear):
    def __init__(self) -> None:
        super().__init__(4, 2)
        self.calls_through_call_impl = 0

    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:  # a class that replaces the call: never shortcut
        self.calls_through_call_impl += 1
        return super()._call_impl(*args, **kwargs)


def test_invariant_1_torch_keeps_its_global_hooks_in_dicts_and_they_still_run() -> None:
    assert DIRECT_CALLS  # this torch keeps them where the fast path looks
    _, model = setup()
    seen: list[str] = []
    handle = torch_module.register_module_forward_hook(lambda module, args, out: seen.append(type(module).__name__))
    try:
        model(torch.randn(1, 4))
    finally:
        handle.remove()
    assert "_FabricModule" in seen and "Linear" in seen  # the wrapper went through `Module.__call__`
    seen.clear()
    model(torch.randn(1, 4))
    assert seen == []


def test_invariant_2_hooks_of_the_strategys_module_run_and_a_replaced_call_is_respected() -> None:
    _, model = setup()
    seen: list[torch.Tensor] = []
    handle = model.module.register_forward_hook(lambda module, args, out: seen.append(out))
    out = model(torch.randn(1, 4))
    handle.remove()
    assert len(seen) == 1 and seen[0] is out
    assert call_state(model).direct_call  # a hook on the inner module does not end the wrapper's shortcut
    fabric = Fabric(accelerator="cpu", plugin_manager=make_manager())
    counting = fabric.setup(CountingForward())
    counting(torch.randn(1, 4))
    assert counting.module.calls_through_call_impl == 1
    assert call_state(counting).forward_module_state is None


def test_invariant_3_a_hook_on_the_wrapper_or_compiling_it_ends_direct_calls() -> None:
    _, model = setup()
    seen: list[object] = []
    model.register_forward_pre_hook(lambda module, args: seen.append(module))
    assert not call_state(model).direct_call
    model(torch.randn(1, 4))
    assert seen == [model]
    _, compiled = setup()
    calls: list[object] = []

    def compiled_call(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return compiled._call_impl(*args, **kwargs)

    compiled._compiled_call_impl = compiled_call  # what `Module.compile()` sets
    assert not call_state(compiled).direct_call
    compiled(torch.randn(1, 4))
    assert len(calls) == 1


def test_invariant_5_checked_autocast_enters_and_exits_like_torch_autocast() -> None:
    cls = checked_autocast("cpu", torch.bfloat16)
    assert cls is checked_autocast("cpu", torch.bfloat16)  # made once per pair
    assert issubclass(cls, torch.autocast)
    reference = torch.autocast("cpu", dtype=torch.bfloat16)
    assert {k: getattr(cls(), k) for k in vars(reference)} == vars(reference)
    layer = nn.Linear(4, 2)
    assert not torch.is_autocast_enabled("cpu")
    outer = cls()
    with outer:
        assert layer(torch.randn(1, 4)).dtype == torch.bfloat16
        with cls(), torch.autocast("cpu", enabled=False):  # nested instances keep their own saved state
            assert layer(torch.randn(1, 4)).dtype == torch.float32
        assert torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("cpu")
    assert layer(torch.randn(1, 4)).dtype == torch.float32


def test_invariant_5_checked_autocast_checks_the_pair_when_made() -> None:
    with pytest.raises(RuntimeError, match="device type"):
        checked_autocast("unsupported_device", torch.bfloat16)
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        disabled = checked_autocast("cpu", torch.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # checked once: entering does not warn again
        with disabled():
            assert not torch.is_autocast_enabled("cpu")


def test_invariant_6_the_plan_is_frozen_and_shared_by_the_wrapper_and_fabric_backward() -> None:
    fabric, model = setup("bf16-mixed")
    plan = call_state(model).plan
    assert isinstance(plan, StepPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.plain_forward = True  # type: ignore[misc]
    assert plan.inline_autocast and plan.plain_backward and plan.guards_backward
    assert fabric._plain_backward is plan.plain_backward


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_a_copy_of_the_wrapper_calls_its_own_forward_module(precision: str) -> None:
    _, model = setup(precision)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        state = call_state(clone)
        assert state is not call_state(model) and state.plan is not None
        assert state.forward_module_state is not None
        assert state.forward_module_state[0] is clone._forward_module
        assert state.forward_module_state[1] is clone._forward_module.__dict__
        with torch.no_grad():
            clone.module.weight.fill_(1.0)
            clone.module.bias.fill_(0.0)
        # The copy's weights, not the original's, and the same conversions (bf16 inside, float32 out).
        assert torch.equal(clone(torch.ones(1, 4)), torch.full((1, 2), 4.0))
        assert clone(torch.ones(1, 4)).dtype == torch.float32
        assert (state.autocast_call is not None) is (precision == "bf16-mixed")


class _CountsReads(FloatCastPrecision):
    """A float-cast precision that counts reads of its declaration (bitsandbytes decides its dtype then)."""

    precision = "counts-reads"

    def __init__(self) -> None:
        self.reads = 0

    @property
    def conversions(self) -> Conversions:
        self.reads += 1
        return true_conversions(torch.float64)


def test_the_plan_is_made_when_the_wrappers_are_built_not_when_fabric_is() -> None:
    # Before `launch()` a precision must not be asked: deciding bitsandbytes' dtype asks CUDA, which must
    # wait until the processes are forked.
    plugin = _CountsReads()
    fabric = Fabric(accelerator="cpu", plugins=[plugin], plugin_manager=make_manager())
    assert plugin.reads == 0
    loss = nn.Linear(4, 1)(torch.randn(2, 4)).sum()
    fabric.backward(loss)  # before any setup: the general path, which is right for every precision
    model = fabric.setup(nn.Linear(4, 2))
    assert plugin.reads > 0
    assert fabric._plain_backward and fabric._direct_backward  # nothing guards the outputs
    assert model(torch.randn(1, 4)).dtype == torch.float32 and model.module.weight.dtype == torch.float64
