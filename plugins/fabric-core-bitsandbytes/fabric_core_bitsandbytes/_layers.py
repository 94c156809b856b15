"""The bitsandbytes layer classes each mode uses, and the swap of a model's ``nn.Linear`` layers for them.

Importing this module imports bitsandbytes (a few seconds); the precision plugin imports it when built.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

import torch
from bitsandbytes.nn.modules import Int8Params, Linear4bit, Linear8bitLt, Params4bit
from torch import nn

__all__ = ["FOUR_BIT_MODES", "INT8_MODES", "QUANTIZED_LAYERS", "linear_class", "replace_linear_layers"]

FOUR_BIT_MODES: Final = ("nf4", "nf4-dq", "fp4", "fp4-dq")
INT8_MODES: Final = ("int8", "int8-training")
#: LLM.int8()'s outlier threshold: activation columns above it are multiplied in 16 bits.
INT8_THRESHOLD: Final = 6.0
QUANTIZED_LAYERS: Final = (Linear4bit, Linear8bitLt)
# bitsandbytes leaves its constructors unannotated.
_Linear4bit: Any = Linear4bit
_Linear8bitLt: Any = Linear8bitLt


def linear_class(mode: str, dtype: torch.dtype) -> type[nn.Linear]:
    """A bitsandbytes layer class for ``mode`` that is built like ``nn.Linear(in, out, bias, device, dtype)``.

    ``torch.nn.Linear`` can be replaced by it while a model is created (``fabric.init_module()``).

    Args:
        mode: One of :data:`FOUR_BIT_MODES` and :data:`INT8_MODES`.
        dtype: The compute dtype of the 4-bit layers.
    """
    if mode in FOUR_BIT_MODES:
        quant_type, compress_statistics = mode[:3], mode.endswith("-dq")

        def init_4bit(
            self: Any, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None
        ) -> None:
            _Linear4bit.__init__(
                self,
                in_features,
                out_features,
                bias=bias,
                compute_dtype=compute_dtype,
                compress_statistics=compress_statistics,
                quant_type=quant_type,
                device=device,
            )

        compute_dtype = dtype
        name = f"{quant_type.upper()}{'DQ' if compress_statistics else ''}Linear"
        return type(name, (Linear4bit,), {"__init__": init_4bit, "__module__": __name__})
    has_fp16_weights = mode == "int8-training"

    def init_8bit(
        self: Any, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None
    ) -> None:
        _Linear8bitLt.__init__(
            self,
            in_features,
            out_features,
            bias=bias,
            has_fp16_weights=has_fp16_weights,
            threshold=INT8_THRESHOLD,
            device=device,
        )

    name = "Int8TrainingLinear" if has_fp16_weights else "Int8Linear"
    return type(name, (Linear8bitLt,), {"__init__": init_8bit, "__module__": __name__})


def replace_linear_layers(
    module: nn.Module, cls: type[nn.Linear], dtype: torch.dtype | None, ignore: Collection[str], prefix: str = ""
) -> list[str]:
    """Replace every ``nn.Linear`` below ``module`` whose qualified name starts with none of ``ignore``.

    The new layers take over the weights unquantized; bitsandbytes quantizes them when the module is moved
    with ``.to(device)``. Biases are cast to ``dtype``, as bitsandbytes would at the first forward (``None``:
    they keep theirs).

    Returns:
        The qualified names of the replaced layers.
    """
    replaced: list[str] = []
    for name, child in module.named_children():
        qualified = f"{prefix}.{name}" if prefix else name
        if any(qualified.startswith(skip) for skip in ignore):
            continue
        if isinstance(child, nn.Linear) and not isinstance(child, QUANTIZED_LAYERS):
            # Built on the meta device: nothing is allocated or initialised before the weights are moved in.
            layer = cls(child.in_features, child.out_features, bias=child.bias is not None, device="meta")
            layer.weight = _with_data(layer.weight, child.weight.detach().clone())
            if child.bias is not None:
                bias = child.bias.detach() if dtype is None else child.bias.detach().to(dtype)
                layer.bias = nn.Parameter(bias, requires_grad=child.bias.requires_grad)
            layer.train(child.training)
            setattr(module, name, layer)
            replaced.append(qualified)
        else:
            replaced += replace_linear_layers(child, cls, dtype, ignore, qualified)
    return replaced


def _with_data(param: Any, data: torch.Tensor) -> nn.Parameter:
    """The same kind of bitsandbytes parameter as ``param`` (same quantization settings), holding ``data``."""
    if isinstance(param, Params4bit):
        return Params4bit(
            data,
            requires_grad=False,
            blocksize=param.blocksize,
            compress_statistics=param.compress_statistics,
            quant_type=param.quant_type,
            quant_storage=param.quant_storage,
            module=param.module,
        )
    trainable: bool = param.has_fp16_weights
    return Int8Params(data, requires_grad=trainable, has_fp16_weights=trainable)
