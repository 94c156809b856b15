"""Lightning's ``plugins.precision.transformer_engine`` path.

``TransformerEnginePrecision`` lives in :mod:`fabric_core.precision.transformer_engine` and is served here on first
access (importing this path imports no torch); building it needs ``transformer_engine``. Lightning's module-level
helpers are here: the availability flag and the swap of ``nn.Linear``/``nn.LayerNorm`` layers for Transformer
Engine's (which imports ``transformer_engine`` when called, never on import).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from fabric_core._deferred import lightning_reexports, reexports
from fabric_core.utilities._requirements import RequirementCache

if TYPE_CHECKING:
    from torch.nn import Module

__all__: list[str] = []

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
                    "input features divisible by 8 and output features divisible by 16, and it has "
                    f"{child.in_features} and {child.out_features}. Pad the layer's dimensions to convert it."
                )
                continue
            linear = te.Linear(child.in_features, child.out_features, bias=child.bias is not None)
            linear.weight.data = child.weight.data.clone()
            if child.bias is not None:
                linear.bias.data = child.bias.data.clone()
            log.debug("Replaced the layer %r with Transformer Engine's Linear", name)
            setattr(module, name, linear)
        elif isinstance(child, torch.nn.LayerNorm):
            norm = te.LayerNorm(child.normalized_shape[0], eps=child.eps)
            norm.weight.data = child.weight.data.clone()
            if child.bias is not None and norm.bias is not None:
                norm.bias.data = child.bias.data.clone()
            log.debug("Replaced the layer %r with Transformer Engine's LayerNorm", name)
            setattr(module, name, norm)
        else:
            # Transformer Engine's fused layers (LayerNormLinear, ...) would need several modules merged.
            _convert_layers(child)


# The precision class (loaded on first access), then the names Lightning's module imports from its others.
__getattr__ = reexports(
    __name__,
    {"TransformerEnginePrecision": "fabric_core.precision.transformer_engine"},
    fallback=lightning_reexports(__name__),
)
