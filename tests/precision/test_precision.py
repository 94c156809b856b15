"""The built-in precision plugins: 64-true, 16-true, bf16-true, 16-mixed, bf16-mixed."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from fabric_core import Fabric
from fabric_core.errors import InvalidConfigError
from fabric_core.precision.double import DoublePrecision
from fabric_core.precision.float_cast import (
    PLAIN_HOOK_NAMES,
    Conversions,
    FloatCastPrecision,
    mixed_conversions,
    true_conversions,
)
from fabric_core.precision.half import HalfPrecision
from fabric_core.precision.mixed import MixedPrecision
from fabric_core.precision.precision import Precision, convert_floating_tensors
from fabric_core.strategies.single_device import SingleDeviceStrategy
from fabric_core.testing import make_manager
from fabric_core.wrappers import StepPlan, _fast_path, step_plan

Pair = namedtuple("Pair", ["x", "y"])


@dataclasses.dataclass(frozen=True)
class Batch:
    x: Tensor
    label: str


class Probe(nn.Module):
    """A linear layer that records what its forward saw."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.seen: dict[str, Any] = {}

    def forward(self, x: Tensor) -> Tensor:
        self.seen = {
            "input": x.dtype,
            "default": torch.get_default_dtype(),
            "autocast": torch.is_autocast_enabled("cpu"),
        }
        out: Tensor = self.linear(x)
        self.seen["output"] = out.dtype
        return out


def run_forward(precision: Precision, module: nn.Module, x: Tensor) -> Any:
    """What the wrapped module does around a forward."""
    x = precision.convert_input(x)
    with precision.forward_context():
        out = module(x)
    return precision.convert_output(out)


# -- convert_floating_tensors ------------------------------------------------------------------------------


def test_convert_returns_the_same_objects_when_nothing_needs_converting() -> None:
    x, labels = torch.randn(2), torch.tensor([1, 2])
    data: tuple[Any, ...] = ((x, labels), {"x": x, "n": 3, "name": "a", "none": None}, [x, 1.5])
    assert convert_floating_tensors(data, torch.float32) is data
    assert convert_floating_tensors(labels, torch.float64) is labels
    assert convert_floating_tensors("text", torch.float64) == "text"
    converted = convert_floating_tensors(data, torch.float64)
    assert converted is not data and converted[0][1] is labels and converted[1]["n"] == 3


def test_convert_casts_only_floating_tensors_and_leaves_the_input_alone() -> None:
    x, labels = torch.randn(2), torch.tensor([1, 2])
    data: dict[str, Any] = {"pair": (x, labels), "list": [x], "other": 7}
    out = convert_floating_tensors(data, torch.float16)
    assert out["pair"][0].dtype == torch.float16
    assert out["pair"][1] is labels
    assert out["list"][0].dtype == torch.float16
    assert out["other"] == 7
    assert data["pair"][0] is x and data["list"][0] is x


def test_convert_keeps_container_types() -> None:
    x = torch.randn(2)
    ordered = OrderedDict([("b", x), ("a", x)])
    default: defaultdict[str, Any] = defaultdict(list, {"x": x})
    pair = Pair(x, 1)
    converted = convert_floating_tensors([ordered, default, pair], torch.float64)
    assert type(converted[0]) is OrderedDict and list(converted[0]) == ["b", "a"]
    assert type(converted[1]) is defaultdict and converted[1].default_factory is list
    assert type(converted[2]) is Pair and converted[2].y == 1
    assert converted[0]["a"].dtype == converted[1]["x"].dtype == converted[2].x.dtype == torch.float64


def test_convert_walks_dataclasses() -> None:
    out = convert_floating_tensors(Batch(torch.randn(2), "a"), torch.bfloat16)
    assert isinstance(out, Batch) and out.x.dtype == torch.bfloat16 and out.label == "a"


# -- 64-true -----------------------------------------------------------------------------------------------


def test_double_converts_the_module_to_float64() -> None:
    module = DoublePrecision().convert_module(nn.Linear(4, 3))
    assert {p.dtype for p in module.parameters()} == {torch.float64}


def test_double_forward_runs_in_float64_and_returns_the_default_dtype() -> None:
    precision = DoublePrecision()
    module = precision.convert_module(Probe())
    out = run_forward(precision, module, torch.randn(2, 4))
    assert module.seen == {
        "input": torch.float64,
        "default": torch.float64,
        "autocast": False,
        "output": torch.float64,
    }
    assert out.dtype == torch.float32
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("context", ["tensor_init_context", "module_init_context"])
def test_double_init_contexts_create_float64_and_restore_the_default(context: str) -> None:
    with getattr(DoublePrecision(), context)():
        assert torch.empty(1).dtype == torch.float64
        assert nn.Linear(2, 2).weight.dtype == torch.float64
    assert torch.get_default_dtype() == torch.float32


def test_double_init_context_restores_the_default_after_an_error() -> None:
    with pytest.raises(RuntimeError, match="boom"), DoublePrecision().tensor_init_context():
        raise RuntimeError("boom")
    assert torch.get_default_dtype() == torch.float32


def test_double_serves_64_true() -> None:
    assert DoublePrecision().precision == "64-true"


# -- 16-true / bf16-true -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "dtype"), [("16-true", torch.float16), ("bf16-true", torch.bfloat16)])
def test_half_converts_the_module(name: str, dtype: torch.dtype) -> None:
    module = HalfPrecision(name).convert_module(nn.Linear(4, 3))
    assert {p.dtype for p in module.parameters()} == {dtype}


@pytest.mark.parametrize(("name", "dtype"), [("16-true", torch.float16), ("bf16-true", torch.bfloat16)])
def test_half_forward_runs_in_half_without_autocast(name: str, dtype: torch.dtype) -> None:
    precision = HalfPrecision(name)
    module = precision.convert_module(Probe())
    out = run_forward(precision, module, torch.randn(2, 4))
    assert module.seen == {"input": dtype, "default": dtype, "autocast": False, "output": dtype}
    assert out.dtype == torch.float32
    assert precision.precision == name


@pytest.mark.parametrize("name", ["16-true", "bf16-true"])
def test_half_init_contexts_create_half_and_restore_the_default(name: str) -> None:
    precision = HalfPrecision(name)
    with precision.module_init_context():
        assert nn.Linear(2, 2).weight.dtype == precision.dtype
    with precision.tensor_init_context():
        assert torch.zeros(1).dtype == precision.dtype
    assert torch.get_default_dtype() == torch.float32


def test_half_rejects_other_precisions_naming_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match=r"'16-mixed'.*`precision` must be one of: '16-true', 'bf16-true'"):
        HalfPrecision("16-mixed")


# -- 16-mixed / bf16-mixed: forward ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "dtype"), [("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)])
def test_mixed_keeps_parameters_in_float32(name: str, dtype: torch.dtype) -> None:
    module = MixedPrecision(name, "cpu").convert_module(nn.Linear(4, 3))
    assert {p.dtype for p in module.parameters()} == {torch.float32}


@pytest.mark.parametrize(("name", "dtype"), [("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)])
def test_mixed_forward_runs_under_autocast(name: str, dtype: torch.dtype) -> None:
    precision = MixedPrecision(name, "cpu")
    module = Probe()
    out = run_forward(precision, module, torch.randn(2, 4))
    assert module.seen == {"input": dtype, "default": torch.float32, "autocast": True, "output": dtype}
    assert out.dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")


def test_mixed_autocasts_to_its_dtype() -> None:
    with MixedPrecision("bf16-mixed", "cpu").forward_context():
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_mixed_accepts_a_torch_device() -> None:
    precision = MixedPrecision("bf16-mixed", torch.device("cpu"))
    assert precision.device == "cpu"
    assert precision.precision == "bf16-mixed"


def test_mixed_rejects_other_precisions_naming_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match=r"'bf16-true'.*Valid choices: '16-mixed', 'bf16-mixed'"):
        MixedPrecision("bf16-true", "cpu")


def test_bf16_mixed_has_no_scaler_and_rejects_one() -> None:
    assert MixedPrecision("bf16-mixed", "cpu").scaler is None
    with pytest.raises(ValueError, match="bf16 needs no loss scaling"):
        MixedPrecision("bf16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))


# -- 16-mixed: the grad scaler -----------------------------------------------------------------------------


def make_step(precision: Precision, lr: float = 0.1) -> tuple[nn.Linear, torch.optim.SGD, SingleDeviceStrategy]:
    torch.manual_seed(0)
    module = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    return module, optimizer, SingleDeviceStrategy("cpu", precision=precision)


def reference_grads(module: nn.Linear, x: Tensor) -> list[Tensor]:
    reference = nn.Linear(4, 1)
    reference.load_state_dict(module.state_dict())
    reference(x).sum().backward()
    return [p.grad.clone() for p in reference.parameters() if p.grad is not None]


def test_16_mixed_creates_a_grad_scaler_for_its_device() -> None:
    scaler = MixedPrecision("16-mixed", "cpu").scaler
    assert isinstance(scaler, torch.amp.GradScaler)
    assert scaler.is_enabled() and scaler.get_scale() == 2.0**16


def test_16_mixed_uses_the_given_scaler() -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    assert MixedPrecision("16-mixed", "cpu", scaler=scaler).scaler is scaler


def test_16_mixed_backward_scales_the_loss() -> None:
    precision = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=8.0))
    module, _, strategy = make_step(precision)
    x = torch.randn(3, 4)
    strategy.backward(module(x).sum(), module)
    for grad, expected in zip([p.grad for p in module.parameters()], reference_grads(module, x), strict=True):
        torch.testing.assert_close(grad, expected * 8.0)


def test_16_mixed_unscales_before_clipping_and_only_once() -> None:
    precision = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=8.0))
    module, optimizer, strategy = make_step(precision)
    x = torch.randn(3, 4)
    strategy.backward(module(x).sum(), module)
    expected = reference_grads(module, x)
    norm = strategy.clip_gradients_norm(module, optimizer, max_norm=1e6)
    torch.testing.assert_close(norm, torch.linalg.vector_norm(torch.cat([g.flatten() for g in expected])))
    # A second clip in the same step must neither raise (torch forbids a second unscale_) nor unscale again.
    strategy.clip_gradients_value(module, optimizer, clip_val=1e6)
    for grad, want in zip([p.grad for p in module.parameters()], expected, strict=True):
        torch.testing.assert_close(grad, want)


def test_16_mixed_step_applies_unscaled_gradients_and_updates_the_scaler() -> None:
    precision = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=8.0))
    module, optimizer, strategy = make_step(precision, lr=0.5)
    x = torch.randn(3, 4)
    before = [p.detach().clone() for p in module.parameters()]
    strategy.backward(module(x).sum(), module)
    expected = reference_grads(module, x)
    strategy.optimizer_step(optimizer)
    for param, old, grad in zip(module.parameters(), before, expected, strict=True):
        torch.testing.assert_close(param.detach(), old - 0.5 * grad)
    # After update() the next step may unscale again.
    optimizer.zero_grad()
    strategy.backward(module(x).sum(), module)
    strategy.clip_gradients_norm(module, optimizer, max_norm=1e6)
    assert precision.scaler is not None
    assert precision.scaler._get_growth_tracker() == 1


def test_16_mixed_skips_the_step_on_overflow_and_lowers_the_scale() -> None:
    precision = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=8.0))
    module, optimizer, strategy = make_step(precision)
    before = [p.detach().clone() for p in module.parameters()]
    strategy.backward(module(torch.randn(3, 4)).sum(), module)
    assert module.weight.grad is not None
    module.weight.grad[0, 0] = float("inf")
    assert strategy.optimizer_step(optimizer) is None
    for param, old in zip(module.parameters(), before, strict=True):
        torch.testing.assert_close(param.detach(), old)
    assert precision.scaler is not None and precision.scaler.get_scale() == 4.0


class ReportingSGD(torch.optim.SGD):
    def step(self, closure: Any = None) -> Any:
        super().step()
        return "stepped"


def test_16_mixed_step_returns_what_the_optimizer_returned() -> None:
    precision = MixedPrecision("16-mixed", "cpu")
    module = nn.Linear(4, 1)
    optimizer = ReportingSGD(module.parameters(), lr=0.1)
    precision.backward(module(torch.randn(2, 4)).sum(), module)
    assert precision.optimizer_step(optimizer) == "stepped"


def test_16_mixed_rejects_lbfgs() -> None:
    precision = MixedPrecision("16-mixed", "cpu")
    module = nn.Linear(4, 1)
    with pytest.raises(TypeError, match=r"AMP and the LBFGS optimizer are not compatible\."):
        precision.optimizer_step(torch.optim.LBFGS(module.parameters()))


def test_bf16_mixed_backward_and_step_are_plain() -> None:
    precision = MixedPrecision("bf16-mixed", "cpu")
    module, optimizer, strategy = make_step(precision)
    x = torch.randn(3, 4)
    strategy.backward(module(x).sum(), module)
    for grad, expected in zip([p.grad for p in module.parameters()], reference_grads(module, x), strict=True):
        torch.testing.assert_close(grad, expected)
    strategy.clip_gradients_norm(module, optimizer, max_norm=1.0)
    strategy.optimizer_step(torch.optim.LBFGS(module.parameters()), closure=lambda: module(x).sum())
    assert precision.state_dict() == {}


def test_16_mixed_state_dict_round_trip() -> None:
    source = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=128.0))
    module = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    for overflow in (True, False):  # one skipped step halves the scale, one good step grows the tracker
        source.backward(module(torch.randn(2, 4)).sum(), module)
        if overflow:
            module.bias.grad.fill_(float("nan"))  # type: ignore[union-attr]
        source.optimizer_step(optimizer)
        optimizer.zero_grad()
    state = source.state_dict()
    assert state["scale"] == 64.0 and state["_growth_tracker"] == 1
    target = MixedPrecision("16-mixed", "cpu")
    target.load_state_dict(state)
    assert target.state_dict() == state


def plan_of(precision: Precision) -> StepPlan:
    return step_plan(SingleDeviceStrategy("cpu", precision=precision))


class _TaggingMixed(MixedPrecision):
    """Overrides the input conversion without declaring it a plain cast: the hook itself must run."""

    def convert_input(self, data: Any) -> Any:
        args, kwargs = data
        return tuple(a * 0 + 7 if isinstance(a, torch.Tensor) else a for a in args), kwargs


def test_an_overridden_conversion_hook_is_called_even_where_the_base_declared_a_cast() -> None:
    plugin = _TaggingMixed("bf16-mixed", "cpu")
    plan = plan_of(plugin)
    assert plan.input_dtype is None and plan.convert_input is not None  # the hook, not the declared cast
    assert plan.output_to_default and plan.convert_output is None  # inherited, still the declared cast
    fabric = Fabric(accelerator="cpu", plugins=[plugin], plugin_manager=make_manager())
    seen: list[torch.Tensor] = []
    model = fabric.setup(nn.Linear(4, 2))
    model.module.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    assert model(torch.randn(2, 4)).dtype == torch.float32
    assert torch.equal(seen[0], torch.full((2, 4), 7.0))  # the subclass's conversion ran, not a cast


def test_a_conversion_replaced_on_the_instance_is_called() -> None:
    plugin = MixedPrecision("bf16-mixed", "cpu")
    calls: list[object] = []
    plugin.convert_output = lambda data: calls.append(data) or data  # type: ignore[method-assign]
    assert not plan_of(plugin).output_to_default and plan_of(plugin).convert_output is not None
    model = Fabric(accelerator="cpu", plugins=[plugin], plugin_manager=make_manager()).setup(nn.Linear(4, 2))
    out = model(torch.randn(2, 4))
    assert calls == [out] and out.dtype == torch.bfloat16  # the replacement returned it unconverted


@pytest.mark.parametrize(
    ("precision", "input_dtype"),
    [("bf16-mixed", torch.bfloat16), ("bf16-true", torch.bfloat16), ("64-true", torch.float64)],
)
def test_declared_casts_convert_positional_and_keyword_inputs_alike(precision: str, input_dtype: torch.dtype) -> None:
    fabric = Fabric(accelerator="cpu", precision=precision, plugin_manager=make_manager())  # type: ignore[arg-type]
    seen: dict[str, torch.dtype] = {}

    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 2)

        def forward(self, a: torch.Tensor, *, b: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
            seen.update(a=a.dtype, b=b.dtype, index=index.dtype)
            return self.layer(a), index

    model = fabric.setup(TwoInputs())
    out, index = model(torch.randn(2, 4), b=torch.randn(2), index=torch.arange(2))
    assert seen == {"a": input_dtype, "b": input_dtype, "index": torch.int64}
    assert out.dtype == torch.get_default_dtype() and index.dtype == torch.int64


class _Recorder(nn.Module):
    """Records what the forward sees: input dtypes, and whether and how autocast is on."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)
        self.seen: list[tuple[Any, ...]] = []

    def forward(self, batch: Any, scale: Tensor | None = None) -> Any:
        x = batch["x"] if isinstance(batch, dict) else batch
        self.seen.append((x.dtype, torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        out = self.layer(x.float())  # under autocast the layer still runs in the autocast dtype
        return {"out": out, "index": torch.arange(2)} if isinstance(batch, dict) else out


@pytest.mark.parametrize("batch_kind", ["tensor", "dict"])
def test_the_inlined_mixed_forward_matches_the_general_one(batch_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    general_calls: list[int] = []
    general_forward = _fast_path.precision_forward

    def counted(*args: Any) -> Any:
        general_calls.append(1)
        return general_forward(*args)

    monkeypatch.setattr(_fast_path, "precision_forward", counted)
    fabric = Fabric(accelerator="cpu", precision="bf16-mixed", plugin_manager=make_manager())
    model = fabric.setup(_Recorder())
    x = torch.randn(3, 4)
    batch: Any = x if batch_kind == "tensor" else {"x": x}
    for _ in range(3):
        fast = model(batch)
        out = fast if batch_kind == "tensor" else fast["out"]
        fabric.backward(out.sum())
    general = model(batch, scale=None)  # a keyword: the general path
    for result in (fast, general):
        out = result if batch_kind == "tensor" else result["out"]
        assert out.dtype == torch.float32
        if batch_kind == "dict":
            assert result["index"].dtype == torch.int64
    assert general_calls == [1]  # the keyword call only: the loop's calls took the inlined path
    assert (fast if batch_kind == "tensor" else fast["out"])._backward_hooks is not None  # guarded there too
    assert model.module.seen == [(torch.bfloat16, True, torch.bfloat16)] * 4
    assert torch.equal(
        fast if batch_kind == "tensor" else fast["out"], general if batch_kind == "tensor" else general["out"]
    )


class _NoAutocast(MixedPrecision):
    """Overrides the context without declaring it an autocast: the wrapper must enter this one."""

    def forward_context(self) -> Any:
        return contextlib.nullcontext()


def test_an_overridden_forward_context_is_entered_instead_of_autocast() -> None:
    plugin = _NoAutocast("bf16-mixed", "cpu")
    assert plan_of(plugin).autocast is None and not plan_of(plugin).inline_autocast
    assert plan_of(MixedPrecision("bf16-mixed", "cpu")).autocast == ("cpu", torch.bfloat16)
    fabric = Fabric(accelerator="cpu", plugins=[plugin], plugin_manager=make_manager())
    model = fabric.setup(_Recorder())
    for _ in range(2):
        fabric.backward(model(torch.randn(3, 4)).sum())
    assert [enabled for _, enabled, _ in model.module.seen] == [False, False]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"plain_hooks": frozenset({"backwards"})}, InvalidConfigError, r"'backwards' is not a step hook.*'backward'"),
        ({"input_dtype": torch.int64}, InvalidConfigError, r"input_dtype=torch.int64.*floating-point"),
        ({"module_dtype": "bf16"}, TypeError, r"module_dtype='bf16'.*torch.dtype"),
        ({"autocast": ("cpu", "bf16")}, TypeError, r"autocast=\('cpu', 'bf16'\).*device type, dtype"),
        (
            {"forward_dtype": torch.float16, "autocast": ("cpu", torch.float16)},
            InvalidConfigError,
            r"one context",
        ),
    ],
)
def test_a_wrong_conversions_declaration_fails_when_made(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Conversions(**kwargs)


class _DeclaresNothing(FloatCastPrecision):
    precision = "declares-nothing"


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        (HalfPrecision("bf16-true"), true_conversions(torch.bfloat16)),
        (DoublePrecision(), true_conversions(torch.float64)),
        (
            MixedPrecision("bf16-mixed", "cpu"),
            dataclasses.replace(mixed_conversions("cpu", torch.bfloat16), plain_hooks=PLAIN_HOOK_NAMES),
        ),
        (MixedPrecision("16-mixed", "cpu"), mixed_conversions("cpu", torch.float16)),
        (_DeclaresNothing(), Conversions()),
    ],
)
def test_the_hooks_of_a_float_cast_precision_do_what_its_conversions_declare(
    plugin: FloatCastPrecision, expected: Conversions
) -> None:
    assert plugin.conversions == expected
    x = torch.randn(2, 4, dtype=torch.float16)
    args, kwargs = plugin.convert_input(((x,), {"y": x}))
    dtype = expected.input_dtype or torch.float16
    assert args[0].dtype == dtype and kwargs["y"].dtype == dtype
    assert plugin.convert_output(x).dtype == (torch.float32 if expected.output_to_default else torch.float16)
    module = plugin.convert_module(nn.Linear(2, 2))
    assert module.weight.dtype == (expected.module_dtype or torch.float32)
    with plugin.tensor_init_context():
        assert torch.empty(1).dtype == (expected.module_dtype or torch.float32)
    with plugin.forward_context():
        autocasting = torch.is_autocast_enabled("cpu")
        created = torch.empty(1).dtype
    assert autocasting is (expected.autocast is not None)
    assert created == (expected.forward_dtype or torch.float32)
    assert plan_of(plugin).plain_forward is (expected == Conversions())


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-true", torch.bfloat16), ("16-true", torch.float16)])
def test_half_precision_names_its_input_dtype_as_lightning_does(precision: str, dtype: torch.dtype) -> None:
    from fabric_core.precision.half import HalfPrecision

    assert HalfPrecision(precision)._desired_input_dtype is dtype
