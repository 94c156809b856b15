"""Registration of the bitsandbytes precisions: strings only, so discovery imports neither torch nor
bitsandbytes."""

from __future__ import annotations

from typing import Final

from fabric_core.plugin_api import component, module_paths, registers

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

#: One precision per quantization mode.
fabric_core_register_precisions = registers(
    *(
        component(mode, _PRECISION, description=description, defaults={"mode": mode}, requires=("bitsandbytes",))
        for mode, description in MODES.items()
    )
)
#: The Lightning path of the bitsandbytes precision (``fabric_core.plugins.precision.bitsandbytes``).
fabric_core_register_modules = module_paths({"plugins.precision.bitsandbytes": "fabric_core_bitsandbytes.precision"})
