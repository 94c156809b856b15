"""Fully sharded data parallel (FSDP2, and FSDP1 where code needs it) and tensor parallelism for fabric-core.

The strategy modules import torch, so they are loaded on first access of their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core.io.distributed import consolidate, load_distributed_checkpoint
    from fabric_core_fsdp.fsdp import FSDPStrategy
    from fabric_core_fsdp.fsdp1 import FSDP1Strategy
    from fabric_core_fsdp.model_parallel import ModelParallelStrategy
    from fabric_core_fsdp.precision import FSDPPrecision

__all__ = [
    "FSDP1Strategy",
    "FSDPPrecision",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "consolidate",
    "load_distributed_checkpoint",
]
__version__ = "0.1.0"

_WHERE = {
    "FSDPStrategy": "fabric_core_fsdp.fsdp",
    "FSDP1Strategy": "fabric_core_fsdp.fsdp1",
    "FSDPPrecision": "fabric_core_fsdp.precision",
    "ModelParallelStrategy": "fabric_core_fsdp.model_parallel",
    "consolidate": "fabric_core.io.distributed",
    "load_distributed_checkpoint": "fabric_core.io.distributed",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
