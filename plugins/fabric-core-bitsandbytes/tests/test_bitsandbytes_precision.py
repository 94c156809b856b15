"""BitsandbytesPrecision on the CPU with real bitsandbytes layers: conversion, accuracy, training, memory."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from bitsandbytes.nn.modules import Linear4bit, Linear8bitLt
from torch import nn

from fabric_core.errors import InvalidConfigError
from fabric_core_bitsandbytes import BitsandbytesPrecision
from fabric_core_bitsandbytes.precision import MODES

FOUR_BIT = ("nf4", "nf4-dq", "fp4", "fp4-dq")
LAYER_CLASS = {"nf4": "NF4Linear", "nf4-dq": "NF4DQLinear", "fp4": "FP4Linear", "fp4-dq": "FP4DQLinear",
               "int8": "Int8Linear", "int8-training": "Int8TrainingLinear"}  # fmt: skip


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64, bias=False))
        self.norm = nn.LayerNorm(64)
        self.head = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.body(x)))  # type: ignore[no-any-return]


def quantized(mode: str, model: nn.Module, **options: Any) -> tuple[BitsandbytesPrecision, nn.Module]:
    precision = BitsandbytesPrecision(mode, **options)
    model = precision.convert_module(model)
    return precision, model.to("cpu")  # bitsandbytes quantizes here, as when Fabric moves the model


def parameter_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


@pytest.mark.parametrize("mode", MODES)
def test_every_linear_layer_is_replaced_by_the_modes_layer(mode: str) -> None:
    _, model = quantized(mode, Net())
    for layer in (model.body[0], model.body[2], model.head):
        assert type(layer).__name__ == LAYER_CLASS[mode]
        assert isinstance(layer, Linear4bit if mode in FOUR_BIT else Linear8bitLt)
    assert model.body[2].bias is None
    assert type(model.norm) is nn.LayerNorm


@pytest.mark.parametrize("mode", MODES)
def test_ignored_prefixes_keep_their_layers(mode: str) -> None:
    precision, model = quantized(mode, Net(), ignore_modules={"head", "body.2"})
    assert type(model.head) is nn.Linear and type(model.body[2]) is nn.Linear
    assert type(model.body[0]).__name__ == LAYER_CLASS[mode]
    # the untouched layers compute in the same dtype as the rest of the forward
    assert model.head.weight.dtype == precision.dtype
    out = model(precision.convert_input(torch.randn(4, 64)))
    assert out.dtype == precision.dtype


@pytest.mark.parametrize(("mode", "weight_dtype"), [*((m, torch.uint8) for m in FOUR_BIT), ("int8", torch.int8)])
def test_weights_are_quantized_when_the_model_is_moved(mode: str, weight_dtype: torch.dtype) -> None:
    precision = BitsandbytesPrecision(mode)
    model = precision.convert_module(nn.Sequential(nn.Linear(64, 64)))
    assert model[0].weight.dtype == torch.float32
    model.to("cpu")
    assert model[0].weight.dtype == weight_dtype


TOLERANCE = {**dict.fromkeys(FOUR_BIT, 0.2), "int8": 0.02, "int8-training": 0.02}


@pytest.mark.parametrize(("mode", "tolerance"), TOLERANCE.items())
def test_a_forward_stays_close_to_the_fp32_model(mode: str, tolerance: float) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))
    x = torch.randn(32, 64)
    expected = model(x).detach()
    precision, model = quantized(mode, model)
    with precision.forward_context():
        output = model(precision.convert_input(x))
    output = precision.convert_output(output)
    assert output.dtype == torch.float32
    relative = ((output - expected).norm() / expected.norm()).item()
    assert 0 < relative < tolerance


def test_int8_training_trains() -> None:
    torch.manual_seed(0)
    target = nn.Linear(16, 4)
    precision, model = quantized("int8-training", nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    x = torch.randn(64, 16)
    y = target(x).detach()
    losses = []
    for _ in range(30):
        with precision.forward_context():
            output = model(precision.convert_input(x))
        loss = nn.functional.mse_loss(precision.convert_output(output), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert model[0].weight.requires_grad
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(("mode", "ratio"), [*((m, 0.15) for m in FOUR_BIT), ("int8", 0.27), ("int8-training", 1.0)])
def test_quantized_weights_take_the_expected_memory(mode: str, ratio: float) -> None:
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))
    full = parameter_bytes(model)
    _, model = quantized(mode, model)
    # 4-bit: two weights per byte (+ fp16 biases); int8: one byte per weight; int8-training keeps its weights.
    assert parameter_bytes(model) <= ratio * full
    assert parameter_bytes(model) > (ratio - 0.05) * full if mode != "int8-training" else True


def statistics_bytes(layer: nn.Module) -> int:
    state = layer.weight.quant_state
    size = state.absmax.numel() * state.absmax.element_size()
    if state.nested:
        size += state.state2.absmax.numel() * state.state2.absmax.element_size()
    return int(size)


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_double_quantization_shrinks_the_quantization_statistics(quant_type: str) -> None:
    _, single = quantized(quant_type, nn.Sequential(nn.Linear(256, 256)))
    _, double = quantized(f"{quant_type}-dq", nn.Sequential(nn.Linear(256, 256)))
    assert single[0].weight.quant_state.absmax.dtype == torch.float32
    assert double[0].weight.quant_state.nested
    assert statistics_bytes(double[0]) < 0.3 * statistics_bytes(single[0])


def test_the_4bit_compute_dtype_follows_the_plugin() -> None:
    precision, model = quantized("nf4", Net(), dtype=torch.bfloat16)
    assert precision.dtype is torch.bfloat16
    assert model.body[0].compute_dtype is torch.bfloat16
    assert model.norm.weight.dtype is torch.bfloat16
    with precision.forward_context():
        assert model(precision.convert_input(torch.randn(2, 64))).dtype is torch.bfloat16


def test_default_dtypes() -> None:
    assert BitsandbytesPrecision("int8").dtype is torch.float16
    expected = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float16
    assert BitsandbytesPrecision("nf4").dtype is expected


def test_converting_twice_changes_nothing() -> None:
    precision, model = quantized("nf4", Net())
    layer = model.body[0]
    assert precision.convert_module(model).body[0] is layer


def test_init_module_creates_the_quantized_layers_in_the_compute_dtype() -> None:
    precision = BitsandbytesPrecision("fp4", dtype=torch.bfloat16)
    with precision.module_init_context():
        model = Net()
    assert type(model.head).__name__ == "FP4Linear"
    assert model.head.weight.dtype is torch.bfloat16 and model.norm.weight.dtype is torch.bfloat16
    assert nn.Linear is torch.nn.modules.linear.Linear
    model = precision.convert_module(model).to("cpu")
    assert model.head.weight.dtype is torch.uint8


def test_init_module_restores_linear_after_an_error() -> None:
    with pytest.raises(ZeroDivisionError), BitsandbytesPrecision("int8").module_init_context():
        1 / 0  # noqa: B018
    assert nn.Linear is torch.nn.modules.linear.Linear
    assert torch.get_default_dtype() is torch.float32


def test_init_module_with_ignore_modules_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"not supported when used with `BitsandbytesPrecision\(..., ignore_modules"):
        BitsandbytesPrecision("nf4", ignore_modules={"head"}).module_init_context()


def test_inputs_and_outputs_convert_like_half_precision() -> None:
    precision = BitsandbytesPrecision("nf4", dtype=torch.bfloat16)
    data = precision.convert_input({"x": torch.ones(2), "ids": torch.arange(2)})
    assert data["x"].dtype is torch.bfloat16 and data["ids"].dtype is torch.int64
    assert precision.convert_output(torch.ones(1, dtype=torch.bfloat16)).dtype is torch.float32
    with precision.tensor_init_context():
        assert torch.ones(1).dtype is torch.bfloat16


def test_a_model_without_linear_layers_is_refused() -> None:
    with pytest.raises(TypeError, match=r"your model has no Linear layers"):
        BitsandbytesPrecision("nf4").convert_module(nn.Sequential(nn.Conv1d(1, 1, 1)))


@pytest.mark.parametrize("mode", ["int8", "int8-training"])
def test_int8_modes_need_float16(mode: str) -> None:
    with pytest.raises(InvalidConfigError, match=rf"'{mode}' only works with `dtype=torch.float16`, but you chose"):
        BitsandbytesPrecision(mode, dtype=torch.bfloat16)


def test_an_unknown_mode_names_the_valid_ones() -> None:
    with pytest.raises(InvalidConfigError, match=r"mode='int4'.*Valid choices: 'nf4', 'nf4-dq'"):
        BitsandbytesPrecision("int4")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", MODES)
def test_quantizes_when_moved_to_cuda(mode: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))
    x = torch.randn(8, 64)
    expected = model(x).detach()
    precision = BitsandbytesPrecision(mode)
    model = precision.convert_module(model).to("cuda")
    assert model[0].weight.device.type == "cuda"
    with precision.forward_context():
        output = model(precision.convert_input(x.cuda()))
    output = precision.convert_output(output).cpu()
    assert ((output - expected).norm() / expected.norm()).item() < TOLERANCE[mode]
