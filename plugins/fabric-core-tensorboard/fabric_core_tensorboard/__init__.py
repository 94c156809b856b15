"""TensorBoard logger for fabric-core.

The logger module imports torch, so it is loaded on first access of :class:`TensorBoardLogger`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabric_core_tensorboard.logger import TensorBoardLogger

__all__ = ["TensorBoardLogger"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "TensorBoardLogger":
        from fabric_core_tensorboard.logger import TensorBoardLogger

        return TensorBoardLogger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
