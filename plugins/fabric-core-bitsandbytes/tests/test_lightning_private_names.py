"""Lightning's private names of ``plugins.precision.bitsandbytes``, called with the same inputs on both packages."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import OrderedDict
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules.module import _IncompatibleKeys

import fabric_core.plugins.precision.bitsandbytes as ours

lightning = pytest.importorskip("lightning_fabric.plugins.precision.bitsandbytes")
BOTH = pytest.mark.parametrize("module", [lightning, ours], ids=["lightning", "fabric_core"])
NAMES = (
    "log", "_BITSANDBYTES_AVAILABLE", "_quantize_on_load_hook", "_ignore_missing_weights_hook", "_replace_param",
    "_import_bitsandbytes", "_convert_layers",
)  # fmt: skip


def test_every_name_is_importable_from_the_lightning_path() -> None:
    from fabric_core.plugins.precision.bitsandbytes import _BITSANDBYTES_AVAILABLE, _convert_layers

    assert bool(_BITSANDBYTES_AVAILABLE) is bool(lightning._BITSANDBYTES_AVAILABLE) is True
    assert "bitsandbytes" in str(_BITSANDBYTES_AVAILABLE)
    assert callable(_convert_layers)
    assert [name for name in NAMES if not hasattr(ours, name)] == []
    assert isinstance(ours.log, logging.Logger)


@pytest.mark.slow
def test_the_lightning_path_does_not_import_bitsandbytes() -> None:
    code = (
        "import sys, fabric_core.plugins.precision.bitsandbytes as m; "
        "assert m._BITSANDBYTES_AVAILABLE; print('bitsandbytes' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "False"


def test_import_bitsandbytes_gives_the_package() -> None:
    bnb = ours._import_bitsandbytes()
    assert bnb is lightning._import_bitsandbytes()
    assert bnb.__name__ == "bitsandbytes" and hasattr(bnb.nn, "Params4bit")


@BOTH
@pytest.mark.parametrize(
    ("keys", "taken"),
    [(["layer.weight", "layer.bias"], "layer.weight"), (["layer.bias"], None), (["weight"], "weight"), ([], None)],
)
def test_the_load_hook_hands_the_weight_over(module: ModuleType, keys: list[str], taken: str | None) -> None:
    state_dict = OrderedDict((key, torch.full((2,), float(i))) for i, key in enumerate(keys))
    received: list[torch.Tensor] = []
    assert module._quantize_on_load_hook(received.append, state_dict, "prefix.", {}, True, [], []) is None
    expected = [torch.full((2,), float(keys.index(taken)))] if taken else []
    assert [t.tolist() for t in received] == [t.tolist() for t in expected]
    assert list(state_dict) == [key for key in keys if key != taken]


@BOTH
def test_weights_taken_on_load_are_not_missing(module: ModuleType) -> None:
    keys = _IncompatibleKeys(missing_keys=["a.weight", "a.bias", "b.weight", "c"], unexpected_keys=["x.weight"])
    missing = keys.missing_keys
    assert module._ignore_missing_weights_hook(nn.Linear(1, 1), keys) is None
    assert keys.missing_keys is missing  # changed in place: torch reads the same list afterwards
    assert keys.missing_keys == ["a.bias", "c"] and keys.unexpected_keys == ["x.weight"]


def _params(kind: str, device: str) -> Any:
    bnb = lightning._import_bitsandbytes()
    data = torch.zeros(4, 4, device=device)
    if kind == "plain":
        return nn.Parameter(data)
    if kind == "int8":
        return bnb.nn.Int8Params(data, requires_grad=False, has_fp16_weights=False)
    return bnb.nn.Params4bit(data, requires_grad=False, blocksize=64, quant_type="nf4", compress_statistics=True)


def _describe(param: Any) -> tuple[Any, ...]:
    extra = tuple(getattr(param, a, None) for a in ("blocksize", "quant_type", "compress_statistics", "quant_state"))
    return type(param).__name__, param.device.type, param.requires_grad, param.tolist(), extra


@pytest.mark.parametrize("kind", ["plain", "int8", "4bit"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("quant_state", [None, "state"])
def test_replace_param_gives_the_same_parameter(kind: str, device: str, quant_state: Any) -> None:
    data = torch.arange(16.0).reshape(4, 4)
    results = []
    for module in (lightning, ours):
        param = _params(kind, device)
        replaced = module._replace_param(param, data.clone(), quant_state)
        # In place unless the parameter is on the meta device, where it cannot take data.
        assert (replaced is param) is (device != "meta")
        results.append(_describe(replaced))
    assert results[0] == results[1]
    assert results[1][3] == data.tolist()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 4, bias=False), nn.ReLU()), nn.Linear(4, 4).to(torch.float16)
    )


@pytest.mark.parametrize("name", ["_NF4Linear", "_FP4DQLinear", "_Int8LinearInference", "_Linear8bitLt"])
@pytest.mark.parametrize("ignore", [set(), {"2"}, {"1"}])
def test_convert_layers_swaps_the_same_layers(name: str, ignore: set[str]) -> None:
    lightning._import_bitsandbytes()  # defines Lightning's layer classes
    cls = getattr(lightning, name)
    converted = []
    for module in (lightning, ours):
        model = _model()
        original = [p.detach().clone() for p in model.parameters()]
        assert module._convert_layers(model, cls, ignore) is None
        converted.append(model)
        assert all(torch.equal(p.data.to(o.dtype), o) for p, o in zip(model.parameters(), original))
    theirs, mine = ([type(m).__name__ for m in model.modules()] for model in converted)
    assert mine == theirs
    assert mine.count(cls.__name__) == 3 - len(ignore)
    dtypes = [[(type(p).__name__, p.dtype) for p in model.parameters()] for model in converted]
    assert dtypes[0] == dtypes[1]


def test_convert_layers_with_a_prefix_matches_qualified_names() -> None:
    lightning._import_bitsandbytes()
    kept = []
    for module in (lightning, ours):
        model = _model()
        module._convert_layers(model[1], lightning._NF4Linear, {"body.0"}, prefix="body")
        kept.append([type(m).__name__ for m in model.modules()])
    assert kept[0] == kept[1] and kept[1].count("_NF4Linear") == 0
