"""Registration of the bitsandbytes precisions: strings only, so discovery imports neither torch nor
bitsandbytes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from fabric_core.plugin_api import hookimpl

if TYPE_CHECKING:
    from fabric_core.plugin_api import ModuleRegistry, Registry

_PRECISION: Final = "fabric_core_bitsandbytes.precision:BitsandbytesPrecision"
#: Each mode and what it does to the model's ``nn.Linear`` layers.
MODES: Final = {
    "nf4": "4-bit NormalFloat weights (bnb Linear4bit); inference and adapters.",
    "nf4-dq": "4-bit NormalFloat weights with double-quantized statistics (bnb Linear4bit).",
    "fp4": "4-bit float weights (bnb Linear4bit).",
    "fp4-dq": "4-bit float weights with double-quantized statistics (bnb Linear4bit).",
    "int8": "8-bit integer weights for inference, LLM.int8() (bnb Linear8bitLt).",
    "int8-training": "LLM.int8() matmuls; the weights stay trainable in their own dtype (bnb Linear8bitLt).",
}


@hookimpl
def fabric_core_register_precisions(registry: Registry) -> None:
    """Register one precision per quantization mode."""
    for mode, description in MODES.items():
        registry.add(mode, _PRECISION, description=description, defaults={"mode": mode}, requires=("bitsandbytes",))


@hookimpl
def fabric_core_register_modules(registry: ModuleRegistry) -> None:
    """The Lightning path of the bitsandbytes precision (``fabric_core.plugins.precision.bitsandbytes``)."""
    registry.add("plugins.precision.bitsandbytes", "fabric_core_bitsandbytes.precision")
