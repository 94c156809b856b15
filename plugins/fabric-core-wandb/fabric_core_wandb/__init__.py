"""Weights & Biases logger for fabric-core.

The logger module imports wandb, so it is loaded on first access of :class:`WandbLogger`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_wandb.logger import WandbLogger

__all__ = ["WandbLogger"]
__version__ = "0.1.0"

_WHERE = {"WandbLogger": "fabric_core_wandb.logger"}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
