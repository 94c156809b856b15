"""FSDPPrecision: the FSDP2 policy and the conversions each precision string stands for."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fabric_core.errors import InvalidConfigError
from fabric_core_fsdp import FSDPPrecision


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_mixed_precisions_gather_in_half_and_reduce_in_fp32(precision: str, dtype: torch.dtype) -> None:
    policy = FSDPPrecision(precision, device="cpu").mixed_precision_policy
    assert policy is not None
    assert (policy.param_dtype, policy.reduce_dtype) == (dtype, torch.float32)


@pytest.mark.parametrize("precision", ["32-true", "bf16-true", "16-true"])
def test_true_precisions_need_no_policy(precision: str) -> None:
    assert FSDPPrecision(precision, device="cpu").mixed_precision_policy is None


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("16-true", torch.float16)])
def test_true_half_precisions_cast_the_module_and_new_tensors(precision: str, dtype: torch.dtype) -> None:
    plugin = FSDPPrecision(precision, device="cpu")
    assert plugin.convert_module(nn.Linear(2, 2)).weight.dtype == dtype
    with plugin.tensor_init_context():
        assert torch.zeros(1).dtype == dtype
    assert torch.get_default_dtype() == torch.float32
    assert plugin.convert_input(torch.ones(1)).dtype == dtype
    assert plugin.convert_output(torch.ones(1, dtype=dtype)).dtype == torch.float32


def test_mixed_precision_keeps_fp32_parameters_and_autocasts_the_forward() -> None:
    plugin = FSDPPrecision("bf16-mixed", device="cpu")
    assert plugin.convert_module(nn.Linear(2, 2)).weight.dtype == torch.float32
    with plugin.forward_context():
        out = nn.Linear(2, 2)(torch.ones(1, 2))
    assert out.dtype == torch.bfloat16
    assert plugin.convert_output(out).dtype == torch.float32


def test_full_precision_changes_nothing() -> None:
    plugin = FSDPPrecision("32-true", device="cpu")
    data = torch.ones(2, dtype=torch.float64)
    assert plugin.convert_input(data) is data and plugin.convert_output(data) is data
    assert plugin.scaler is None and plugin.state_dict() == {}


def test_16_mixed_scales_the_loss_and_steps_through_the_scaler() -> None:
    # The default ShardedGradScaler all-reduces its inf check over the process group FSDP always has (stepped on
    # two processes in test_fsdp_training.py); in this process without one, a plain GradScaler does the same.
    plugin = FSDPPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))
    assert plugin.scaler is not None
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = model(torch.ones(1, 2)).sum()
    plugin.backward(loss, model)
    scale = plugin.scaler.get_scale()
    assert model.bias.grad is not None and model.bias.grad.item() == pytest.approx(scale)
    plugin.unscale_gradients(optimizer)
    plugin.unscale_gradients(optimizer)  # at most once per step: a second call would raise in torch
    assert model.bias.grad.item() == pytest.approx(1.0)
    plugin.optimizer_step(optimizer)
    state = plugin.state_dict()
    assert (state["scale"], state["_growth_tracker"]) == (scale, 1)  # a finite step counts towards growth


def test_lbfgs_is_refused_with_a_scaler() -> None:
    plugin = FSDPPrecision("16-mixed", device="cpu")
    with pytest.raises(TypeError, match="LBFGS"):
        plugin.optimizer_step(torch.optim.LBFGS(nn.Linear(1, 1).parameters()))


def test_unknown_precision_lists_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match="'32-true', 'bf16-mixed', '16-mixed', 'bf16-true', '16-true'"):
        FSDPPrecision("64-true")


def test_a_scaler_is_only_for_16_mixed() -> None:
    with pytest.raises(InvalidConfigError, match="only '16-mixed' scales"):
        FSDPPrecision("bf16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))


@pytest.mark.parametrize(("precision", "plain"), [("32-true", True), ("bf16-mixed", False), ("bf16-true", False)])
def test_only_full_precision_leaves_the_forward_plain(precision: str, plain: bool) -> None:
    from fabric_core.strategies.single_device import SingleDeviceStrategy
    from fabric_core.wrappers import step_plan

    plugin = FSDPPrecision(precision, device="cpu")
    plan = step_plan(SingleDeviceStrategy("cpu", precision=plugin))
    converts = (plan.input_dtype, plan.convert_input, plan.forward_context, plan.output_to_default, plan.convert_output)
    assert (converts == (None, None, None, False, None)) is plain
    x = torch.randn(2, 3, dtype=torch.float16)
    # What "plain" promises: the hooks really do nothing in this configuration.
    if plain:
        assert plugin.convert_input(x) is x and plugin.convert_output(x) is x
        with plugin.forward_context():
            assert not torch.is_autocast_enabled("cpu") and torch.get_default_dtype() == torch.float32
