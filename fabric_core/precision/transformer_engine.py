"""FP8 training with NVIDIA Transformer Engine: ``TransformerEnginePrecision``.

Weights are kept in ``weights_dtype``; inside the forward, Transformer Engine's layers compute in FP8 under a
``DelayedScaling`` recipe and other operations autocast to ``fallback_compute_dtype`` on CUDA. ``nn.Linear`` and
``nn.LayerNorm`` layers are swapped for Transformer Engine's unless ``replace_layers=False`` (or the model already
has Transformer Engine layers). It needs ``transformer_engine`` (and so a CUDA GPU); building it without raises
``ModuleNotFoundError`` naming the requirement. Lightning's ``plugins.precision.transformer_engine`` path serves it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any, Final, Literal

import torch
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import Precision, convert_floating_tensors
from fabric_core.precision.utils import _ClassReplacementContextManager, _DtypeContextManager
from fabric_core.utilities._requirements import RequirementCache
from fabric_core.utilities.rank_zero import rank_zero_info

__all__ = ["TransformerEnginePrecision"]

#: Truthy when Transformer Engine 0.11 or later is installed (checked on first use; nothing is imported).
_TRANSFORMER_ENGINE_AVAILABLE: Final = RequirementCache("transformer_engine>=0.11.0")
log = logging.getLogger(__name__)


def _convert_layers(module: Module) -> None:
    """Replace the ``nn.Linear`` and ``nn.LayerNorm`` layers below ``module`` with Transformer Engine's, in place.

    The new layers take over the weights (and biases). A linear layer whose input features are not a multiple
    of 8, or whose output features are not a multiple of 16, stays as it is, with a warning: FP8 matmuls need
    those shapes.

    Raises:
        ModuleNotFoundError: Transformer Engine is not installed.
    """
    import torch
    import transformer_engine.pytorch as te

    from fabric_core.utilities.rank_zero import rank_zero_warn

    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            if child.in_features % 8 or child.out_features % 16:
                rank_zero_warn(
                    f"The layer {name!r} stays a `torch.nn.Linear`: Transformer Engine's FP8 linear layers need "
                    "dimensions divisible by 8 and 16 respectively (input features by 8, output features by 16), "
                    f"and it has {child.in_features} and {child.out_features}. Pad the layer's dimensions to "
                    "convert it."
                )
                continue
            linear = te.Linear(child.in_features, child.out_features, bias=child.bias is not None)
            linear.weight.data = child.weight.data.clone()
            if child.bias is not None:
                linear.bias.data = child.bias.data.clone()
            log.debug("Replaced the layer %r with Transformer Engine's Linear", name)
            module.__setattr__(name, linear)  # the instance's own, as Lightning calls it (its tests record it)
        elif isinstance(child, torch.nn.LayerNorm):
            norm = te.LayerNorm(child.normalized_shape[0], eps=child.eps)
            norm.weight.data = child.weight.data.clone()
            if child.bias is not None and norm.bias is not None:
                norm.bias.data = child.bias.data.clone()
            log.debug("Replaced the layer %r with Transformer Engine's LayerNorm", name)
            module.__setattr__(name, norm)
        else:
            # Transformer Engine's fused layers (LayerNormLinear, ...) would need several modules merged.
            _convert_layers(child)


def _dtype(dtype: torch.dtype | str) -> torch.dtype:
    """``dtype``, or the floating-point dtype of torch it names (``"bfloat16"``).

    Raises:
        InvalidConfigError: A name of no floating-point dtype.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    found = getattr(torch, dtype, None) if isinstance(dtype, str) else None
    if not isinstance(found, torch.dtype) or not found.is_floating_point:
        raise InvalidConfigError(
            f"`TransformerEnginePrecision(weights_dtype={dtype!r})`: pass a floating-point `torch.dtype` or its name, "
            "such as torch.bfloat16, 'bfloat16', 'float16' or 'float32'.",
            argument="weights_dtype",
            value=dtype,
        )
    return found


class TransformerEnginePrecision(Precision):
    """FP8 precision through Transformer Engine (``precision="transformer-engine"`` in Lightning).

    Args:
        weights_dtype: The dtype the weights are kept in (``torch.bfloat16``, ``torch.float16``, ...), or its
            name (``"bfloat16"``), as the catalog entries ``"transformer-engine"`` (bfloat16) and
            ``"transformer-engine-float16"`` give it.
        recipe: Transformer Engine's ``DelayedScaling`` recipe, or its fields as a dict (``fp8_format`` by name,
            e.g. ``"HYBRID"``); ``None`` for Transformer Engine's default recipe.
        replace_layers: Swap ``nn.Linear``/``nn.LayerNorm`` for Transformer Engine's layers (``None``: yes, unless
            the model has Transformer Engine layers already).
        fallback_compute_dtype: The autocast dtype of operations FP8 does not cover (default ``weights_dtype``).

    Raises:
        ModuleNotFoundError: Transformer Engine is not installed.
        InvalidConfigError: ``weights_dtype`` names no floating-point dtype of torch.
    """

    precision: Literal["transformer-engine", "transformer-engine-float16"] = "transformer-engine"

    def __init__(
        self,
        *,
        weights_dtype: torch.dtype | str,
        recipe: Mapping[str, Any] | Any | None = None,
        replace_layers: bool | None = None,
        fallback_compute_dtype: torch.dtype | None = None,
    ) -> None:
        if not _TRANSFORMER_ENGINE_AVAILABLE:
            raise ModuleNotFoundError(str(_TRANSFORMER_ENGINE_AVAILABLE))
        from transformer_engine.common.recipe import DelayedScaling, Format

        if recipe is None:
            recipe = DelayedScaling()
        elif isinstance(recipe, Mapping):
            fields = dict(recipe)
            if "fp8_format" in fields:
                fields["fp8_format"] = getattr(Format, fields["fp8_format"])
            recipe = DelayedScaling(**fields)
        self.weights_dtype = _dtype(weights_dtype)
        self.recipe = recipe
        self.replace_layers = replace_layers
        self.fallback_compute_dtype = fallback_compute_dtype or self.weights_dtype

    def convert_module(self, module: Module) -> Module:
        if any("transformer_engine.pytorch" in type(m).__module__ for m in module.modules()):
            if self.replace_layers is True:
                rank_zero_info(
                    "`TransformerEnginePrecision(replace_layers=True)`: the model has Transformer Engine layers "
                    "already, so none are replaced."
                )
        elif self.replace_layers in (None, True):
            _convert_layers(module)
        return module.to(dtype=self.weights_dtype)

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return _DtypeContextManager(self.weights_dtype)

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        stack = contextlib.ExitStack()
        if self.replace_layers:
            import transformer_engine.pytorch as te

            stack.enter_context(
                _ClassReplacementContextManager({"torch.nn.Linear": te.Linear, "torch.nn.LayerNorm": te.LayerNorm})
            )
        stack.enter_context(self.tensor_init_context())
        return stack

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        import transformer_engine.pytorch as te

        stack = contextlib.ExitStack()
        stack.enter_context(_DtypeContextManager(self.weights_dtype))
        stack.enter_context(torch.autocast(device_type="cuda", dtype=self.fallback_compute_dtype))
        stack.enter_context(te.fp8_autocast(enabled=True, fp8_recipe=self.recipe))
        return stack

    def convert_input(self, data: Any) -> Any:
        return convert_floating_tensors(data, self.weights_dtype)

    def convert_output(self, data: Any) -> Any:
        return convert_floating_tensors(data, torch.get_default_dtype())
