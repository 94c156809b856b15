"""DeepSpeed for fabric-core: ``Fabric(strategy="deepspeed_stage_2")`` and the other ZeRO stages.

The implementation modules import torch (and, when used, deepspeed), so they are loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_deepspeed._consolidate import consolidate
    from fabric_core_deepspeed.precision import DeepSpeedPrecision
    from fabric_core_deepspeed.strategy import DeepSpeedStrategy

__all__ = ["DeepSpeedPrecision", "DeepSpeedStrategy", "consolidate"]
__version__ = "0.1.0"

_WHERE = {
    "DeepSpeedStrategy": "fabric_core_deepspeed.strategy",
    "DeepSpeedPrecision": "fabric_core_deepspeed.precision",
    "consolidate": "fabric_core_deepspeed._consolidate",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
