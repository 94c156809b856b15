"""Distributed data parallel strategies for fabric-core.

The strategy modules import torch, so they are loaded on first access of their classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_ddp.ddp import DDPStrategy
    from fabric_core_ddp.dp import DataParallelStrategy

__all__ = ["DDPStrategy", "DataParallelStrategy"]
__version__ = "0.1.0"

_WHERE = {"DDPStrategy": "fabric_core_ddp.ddp", "DataParallelStrategy": "fabric_core_ddp.dp"}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
