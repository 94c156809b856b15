"""Weights & Biases logger for fabric-core.

The logger module imports wandb, so it is loaded on first access of :class:`WandbLogger`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabric_core_wandb.logger import WandbLogger

__all__ = ["WandbLogger"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "WandbLogger":
        from fabric_core_wandb.logger import WandbLogger

        return WandbLogger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
