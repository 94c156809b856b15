"""DeepSpeedStrategy and DeepSpeedPrecision in one process: their errors and conversions (no process group)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch import nn

from fabric_core.errors import InvalidConfigError
from fabric_core_deepspeed import DeepSpeedPrecision, DeepSpeedStrategy


def strategy(stage: int = 2) -> DeepSpeedStrategy:
    return DeepSpeedStrategy(stage=stage, parallel_devices=[torch.device("cpu")] * 2)


def test_the_package_exports_its_classes_and_consolidate() -> None:
    import fabric_core_deepspeed

    assert fabric_core_deepspeed.DeepSpeedStrategy is DeepSpeedStrategy
    assert callable(fabric_core_deepspeed.consolidate)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        fabric_core_deepspeed.Nope  # noqa: B018


def test_model_and_optimizer_are_set_up_together() -> None:
    assert DeepSpeedStrategy.requires_joint_setup is True
    with pytest.raises(NotImplementedError, match=r"fabric.setup\(model, optimizer\)"):
        strategy().setup_optimizer(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1))


@pytest.mark.parametrize("count", [0, 2])
def test_exactly_one_optimizer(count: int) -> None:
    model = nn.Linear(2, 2)
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(count)]
    with pytest.raises(ValueError, match=rf"Currently only one optimizer is supported with DeepSpeed. Got {count}"):
        strategy().setup_module_and_optimizers(model, optimizers)


def test_gradient_clipping_points_to_the_config() -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NotImplementedError, match=r"`gradient_clipping` value in your Config"):
        strategy().clip_gradients_norm(model, optimizer, max_norm=1.0)
    with pytest.raises(NotImplementedError, match=r"gradient_clipping"):
        strategy().clip_gradients_value(model, optimizer, clip_val=1.0)


def test_backward_and_step_need_models_set_up_by_the_strategy() -> None:
    loss = nn.Linear(2, 1)(torch.ones(1, 2)).sum()
    with pytest.raises(RuntimeError, match=r"No models were set up for backward"):
        strategy().backward(loss, None)
    with pytest.raises(ValueError, match=r"The model Linear was not set up by this `DeepSpeedStrategy`"):
        strategy().backward(loss, nn.Linear(2, 1))
    with pytest.raises(ValueError, match=r"The optimizer SGD was not set up"):
        strategy().optimizer_step(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1))


def test_no_backward_sync_control() -> None:
    assert strategy().backward_sync_control is None


def test_stage_3_refuses_empty_init_false() -> None:
    with pytest.raises(NotImplementedError, match=r"`empty_init=False` is not a valid choice .* ZeRO stage 3"):
        strategy(stage=3).module_init_context(empty_init=False)


def test_below_stage_3_init_module_is_the_ordinary_one() -> None:
    torch.manual_seed(0)
    expected = nn.Linear(3, 3).weight.detach().clone()
    torch.manual_seed(0)
    with strategy(stage=2).module_init_context(empty_init=False):
        created = nn.Linear(3, 3)
    assert torch.equal(created.weight, expected)


def test_below_stage_3_module_sharded_context_changes_nothing() -> None:
    torch.manual_seed(0)
    expected = nn.Linear(3, 3).weight.detach().clone()
    torch.manual_seed(0)
    with strategy(stage=2).module_sharded_context():
        created = nn.Linear(3, 3)
    assert torch.equal(created.weight, expected)
    assert not hasattr(created.weight, "ds_id")


def test_model_is_none_before_setup() -> None:
    assert strategy().model is None


def test_below_stage_3_parameters_are_always_whole() -> None:
    assert isinstance(strategy(stage=2).gathered_parameters([]), contextlib.nullcontext)


def test_save_refuses_filter_and_storage_options() -> None:
    with pytest.raises(TypeError, match=r"save_checkpoint\(..., filter=...\)` is not supported"):
        strategy().save_checkpoint("x", {}, filter={"model": lambda k, v: True})
    with pytest.raises(TypeError, match=r"save_checkpoint\(..., storage_options=...\)` is not supported"):
        strategy().save_checkpoint("x", {}, storage_options={})


def test_save_needs_a_deepspeed_model() -> None:
    with pytest.raises(ValueError, match=r"Could not find a DeepSpeed model .*fabric.save\(..., state="):
        strategy().save_checkpoint("x", {"model": nn.Linear(1, 1), "step": 1})


def test_load_needs_a_state_with_a_model(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"state=None\) but a state with at least a model"):
        strategy().load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"not a valid DeepSpeed checkpoint: .*nope \(nothing exists there\)"):
        strategy().load_checkpoint(tmp_path / "nope", {"model": nn.Linear(1, 1)})


def test_a_single_file_loads_like_any_checkpoint(tmp_path: Path) -> None:
    source = nn.Linear(2, 2)
    torch.save({"model": source.state_dict(), "step": 3}, tmp_path / "full.pt")
    target = nn.Linear(2, 2)
    state = {"model": target, "step": 0}
    assert strategy().load_checkpoint(tmp_path / "full.pt", state) == {}
    assert state["step"] == 3
    assert torch.equal(target.weight, source.weight)


# -- the precision --------------------------------------------------------------------------------------
def test_double_precision_is_not_supported() -> None:
    with pytest.raises(InvalidConfigError, match=r"precision='64-true'\)` is not supported in DeepSpeed.*'bf16-true'"):
        DeepSpeedPrecision("64-true")


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("32-true", torch.float32), ("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16),
     ("16-true", torch.float16), ("bf16-true", torch.bfloat16)],
)  # fmt: skip
def test_inputs_take_the_engines_dtype_and_outputs_come_back_in_the_default(precision: str, dtype: torch.dtype) -> None:
    plugin = DeepSpeedPrecision(precision)
    converted = plugin.convert_input({"x": torch.ones(2), "ids": torch.arange(2)})
    assert converted["x"].dtype == dtype and converted["ids"].dtype == torch.int64
    assert plugin.convert_output(torch.ones(2, dtype=dtype)).dtype == torch.float32


@pytest.mark.parametrize(("precision", "dtype"), [("16-true", torch.float16), ("bf16-true", torch.bfloat16)])
def test_true_half_precisions_create_and_convert_the_model_in_half(precision: str, dtype: torch.dtype) -> None:
    plugin = DeepSpeedPrecision(precision)
    assert plugin.convert_module(nn.Linear(2, 2)).weight.dtype == dtype
    with plugin.module_init_context():
        assert nn.Linear(2, 2).weight.dtype == dtype
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_other_precisions_leave_the_model_to_deepspeed(precision: str) -> None:
    plugin = DeepSpeedPrecision(precision)
    assert plugin.convert_module(nn.Linear(2, 2)).weight.dtype == torch.float32
    with plugin.tensor_init_context():
        assert torch.ones(1).dtype == torch.float32


def test_backward_and_step_go_through_an_engine() -> None:
    plugin = DeepSpeedPrecision()
    with pytest.raises(TypeError, match=r"needs the DeepSpeed engine"):
        plugin.backward(torch.ones(1, requires_grad=True).sum(), None)
    with pytest.raises(TypeError, match=r"does not take a closure"):
        plugin.optimizer_step(object(), closure=lambda: 0.0)


def test_load_full_weights_is_lightnings_option_and_refuses_a_folder(tmp_path: Path) -> None:
    import inspect

    lightning_deepspeed = pytest.importorskip("lightning_fabric.strategies.deepspeed")
    theirs = inspect.signature(lightning_deepspeed.DeepSpeedStrategy).parameters["load_full_weights"]
    ours = inspect.signature(DeepSpeedStrategy).parameters["load_full_weights"]
    assert ours.default is theirs.default is False
    strategy = DeepSpeedStrategy(load_full_weights=True)
    assert strategy.load_full_weights is True
    with pytest.raises(FileNotFoundError, match=r"load_full_weights=True.*is not a file"):
        strategy.load_checkpoint(tmp_path, {"model": nn.Linear(2, 2)})
