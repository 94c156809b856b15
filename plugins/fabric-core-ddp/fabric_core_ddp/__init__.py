"""Distributed data parallel strategies for fabric-core.

The strategy modules import torch, so they are loaded on first access of their classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabric_core_ddp.ddp import DDPStrategy
    from fabric_core_ddp.dp import DataParallelStrategy

__all__ = ["DDPStrategy", "DataParallelStrategy"]
__version__ = "0.1.0"

_LAZY = {"DDPStrategy": "fabric_core_ddp.ddp", "DataParallelStrategy": "fabric_core_ddp.dp"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
