"""``torch.compile`` arguments through ``Fabric.setup``, compared with Lightning Fabric.

Lightning records the arguments of a ``torch.compile`` call on the compiled module (``_compile_kwargs``) and
compiles the set-up module again with them. fabric-core compiles again from the compiled module itself; where
the module carries that record (compiled through Lightning's wrapper of ``torch.compile`` or
``_capture_compile_kwargs``), the set-up module carries it too, and ``_unwrap_compiled`` returns it, as in
Lightning. Nothing is compiled here (a compiled module compiles on its first call).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

lightning_fabric = pytest.importorskip("lightning_fabric")

import lightning_fabric.wrappers as lightning_wrappers  # noqa: E402

import fabric_core  # noqa: E402
from fabric_core import wrappers  # noqa: E402

ARGUMENTS: dict[str, Any] = {"fullgraph": True, "dynamic": False, "options": {"max_autotune": False}}
LIBRARIES = pytest.mark.parametrize(
    ("fabric_class", "module"),
    [(lightning_fabric.Fabric, lightning_wrappers), (fabric_core.Fabric, wrappers)],
    ids=["lightning", "fabric-core"],
)


def compiled_with_record(model: nn.Module) -> Any:
    return wrappers._capture_compile_kwargs(torch.compile)(model, **ARGUMENTS)


@LIBRARIES
def test_unwrapping_returns_the_recorded_arguments(fabric_class: Any, module: Any) -> None:
    model = nn.Linear(2, 2)
    compiled = compiled_with_record(model)
    assert compiled._compile_kwargs == ARGUMENTS
    inner, arguments = module._unwrap_compiled(compiled)
    assert inner is model and arguments == ARGUMENTS
    assert module._unwrap_compiled(model) == (model, None)


@LIBRARIES
@pytest.mark.parametrize("setup", ["setup", "setup_module"])
def test_the_set_up_module_is_compiled_again_and_keeps_the_record(fabric_class: Any, module: Any, setup: str) -> None:
    model = nn.Linear(2, 2)
    compiled = compiled_with_record(model)
    fabric_model = getattr(fabric_class(accelerator="cpu", devices=1), setup)(compiled)
    forward_module = fabric_model._forward_module
    assert forward_module is not compiled and forward_module._orig_mod is model
    assert forward_module._compile_kwargs == ARGUMENTS
    assert fabric_model._original_module is model


@LIBRARIES
def test_compiling_with_arguments_records_them(fabric_class: Any, module: Any) -> None:
    recompiled = module._to_compiled(nn.Linear(2, 2), dict(ARGUMENTS))
    assert recompiled._compile_kwargs == ARGUMENTS


@LIBRARIES
def test_a_record_set_to_none_is_an_error_not_a_guess(fabric_class: Any, module: Any) -> None:
    # Lightning's test_unwrap_compiled: the record is there and says nothing.
    compiled = compiled_with_record(nn.Linear(2, 2))
    compiled._compile_kwargs = None
    with pytest.raises(RuntimeError, match="Failed to determine the arguments that were used to compile the module"):
        module._unwrap_compiled(compiled)


def test_a_module_compiled_without_a_record_is_compiled_again_from_itself() -> None:
    # fabric-core does not wrap torch.compile: without a record it reads the compilation from the module.
    # (Importing Lightning above wrapped torch.compile for this process, so the record is taken away.)
    model = nn.Linear(2, 2)
    compiled = torch.compile(model, dynamic=False)
    for holder in (compiled, model):  # torch 2.13's compiled module keeps attributes set on it on the original
        vars(holder).pop("_compile_kwargs", None)
    assert not hasattr(compiled, "_compile_kwargs")
    inner, handle = wrappers._unwrap_compiled(compiled)
    assert inner is model and handle == {"compiled": compiled}
    again = wrappers._to_compiled(nn.Linear(2, 2), handle)
    assert isinstance(again, torch._dynamo.eval_frame.OptimizedModule) and again is not compiled
