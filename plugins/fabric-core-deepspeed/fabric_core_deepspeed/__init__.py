"""DeepSpeed for fabric-core: ``Fabric(strategy="deepspeed_stage_2")`` and the other ZeRO stages.

The implementation modules import torch (and, when used, deepspeed), so they are loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from fabric_core_deepspeed._consolidate import consolidate
    from fabric_core_deepspeed.precision import DeepSpeedPrecision
    from fabric_core_deepspeed.strategy import DeepSpeedStrategy

__all__ = ["DeepSpeedPrecision", "DeepSpeedStrategy", "consolidate"]
__version__: Final = "0.1.0"

_LAZY: Final = {
    "DeepSpeedStrategy": "fabric_core_deepspeed.strategy",
    "DeepSpeedPrecision": "fabric_core_deepspeed.precision",
    "consolidate": "fabric_core_deepspeed._consolidate",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
