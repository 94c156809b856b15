"""Lightning's ``plugins.precision.transformer_engine`` path: its flag and layer swap, next to Lightning's.

Transformer Engine is not installed here (it needs CUDA). Without it both packages fail alike; with a
stand-in ``transformer_engine.pytorch`` whose layers are torch's, both swap the same layers the same way.
"""

from __future__ import annotations

import importlib
import logging
import sys
import warnings
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest
import torch
from torch import nn

import fabric_core.plugins.precision.transformer_engine as ours

lightning = pytest.importorskip("lightning_fabric.plugins.precision.transformer_engine")


def test_the_names_lightning_defines_are_here() -> None:
    from fabric_core.plugins.precision.transformer_engine import _TRANSFORMER_ENGINE_AVAILABLE, _convert_layers

    assert callable(_convert_layers)
    assert bool(_TRANSFORMER_ENGINE_AVAILABLE) is bool(lightning._TRANSFORMER_ENGINE_AVAILABLE) is False
    assert "transformer_engine" in str(_TRANSFORMER_ENGINE_AVAILABLE)
    assert isinstance(ours.log, logging.Logger)


def test_the_precision_is_served_and_refuses_to_build_without_transformer_engine() -> None:
    """lightning.pytorch subclasses it at import; building it without Transformer Engine fails as Lightning's."""
    import fabric_core.connector
    import fabric_core.plugins
    import fabric_core.plugins.precision
    from fabric_core.precision.precision import Precision

    cls = ours.TransformerEnginePrecision
    assert issubclass(cls, Precision)
    assert fabric_core.plugins.TransformerEnginePrecision is fabric_core.plugins.precision.TransformerEnginePrecision
    assert fabric_core.connector.TransformerEnginePrecision is cls is fabric_core.plugins.TransformerEnginePrecision

    class TrainerPrecision:  # stands in for lightning.pytorch's own Precision base
        pass

    class Subclass(TrainerPrecision, cls):  # what lightning.pytorch's TransformerEnginePrecision does at import
        pass

    errors = []
    for precision_class in (Subclass, cls, lightning.TransformerEnginePrecision):
        with pytest.raises(ModuleNotFoundError) as raised:
            precision_class(weights_dtype=torch.bfloat16)
        errors.append(str(raised.value))
    assert errors[0] == errors[1] == errors[2]
    assert "transformer_engine>=0.11.0" in errors[0]
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        ours.nothing_here  # noqa: B018


def test_the_names_lightning_imports_there_are_served_too() -> None:
    from fabric_core.plugins.precision.precision import Precision

    assert ours.Precision is Precision
    assert callable(ours.rank_zero_warn)


def test_the_path_is_the_implementing_module_so_a_patched_flag_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    import fabric_core.precision.transformer_engine as implementation

    assert ours is implementation
    monkeypatch.setattr(ours, "_TRANSFORMER_ENGINE_AVAILABLE", False)  # as Lightning's tests pretend either way
    with pytest.raises(ModuleNotFoundError):
        ours.TransformerEnginePrecision(weights_dtype=torch.float16)


@pytest.mark.parametrize("module", [lightning, ours], ids=["lightning", "fabric_core"])
def test_converting_without_transformer_engine_is_a_missing_module(module: ModuleType) -> None:
    with pytest.raises(ModuleNotFoundError, match="transformer_engine"):
        module._convert_layers(nn.Sequential(nn.Linear(16, 16)))


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``transformer_engine.pytorch`` whose ``Linear``/``LayerNorm`` are torch's, renamed to be told apart."""

    class Linear(nn.Linear):
        pass

    class LayerNorm(nn.LayerNorm):
        pass

    modules: dict[str, ModuleType] = {}
    for name in ("transformer_engine", "transformer_engine.pytorch"):
        modules[name] = ModuleType(name)
        modules[name].__spec__ = ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, modules[name])
    te = modules["transformer_engine.pytorch"]
    modules["transformer_engine"].pytorch = te  # type: ignore[attr-defined]
    te.Linear, te.LayerNorm = Linear, LayerNorm  # type: ignore[attr-defined]
    return te


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32),
        nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 16, bias=False), nn.ReLU()),
        nn.Linear(16, 10),  # 10 output features: not FP8-friendly, stays
        nn.LayerNorm(10),
    )


def _convert(convert: Callable[[nn.Module], None]) -> tuple[nn.Module, list[str]]:
    model = _model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convert(model)
    return model, [str(w.message) for w in caught]


def test_both_swap_the_same_layers_and_keep_the_weights(stand_in: ModuleType) -> None:
    (theirs, their_warnings), (mine, my_warnings) = _convert(lightning._convert_layers), _convert(ours._convert_layers)
    kinds = [[type(m).__qualname__ for m in model.modules()] for model in (theirs, mine)]
    assert kinds[0] == kinds[1]
    swapped = [q for q in kinds[1] if q.startswith("stand_in.")]
    assert sorted(swapped) == ["stand_in.<locals>.LayerNorm"] * 2 + ["stand_in.<locals>.Linear"] * 2
    assert isinstance(mine[2], nn.Linear) and not isinstance(mine[2], stand_in.Linear)
    original = dict(_model().named_parameters())
    for model in (theirs, mine):
        assert {n: p.tolist() for n, p in model.named_parameters()} == {n: p.tolist() for n, p in original.items()}
    assert len(their_warnings) == len(my_warnings) == 1
    for message in (their_warnings[0], my_warnings[0]):
        assert "'2'" in message and "divisible by 8" in message and "16" in message


def test_the_stand_in_was_used(stand_in: ModuleType) -> None:
    model, _ = _convert(ours._convert_layers)
    assert isinstance(model[0], stand_in.Linear) and isinstance(model[1][0], stand_in.LayerNorm)
    assert importlib.import_module("transformer_engine.pytorch") is stand_in
