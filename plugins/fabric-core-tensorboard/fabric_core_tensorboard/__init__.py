"""TensorBoard logger for fabric-core.

The logger module imports torch, so it is loaded on first access of :class:`TensorBoardLogger`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_tensorboard.logger import TensorBoardLogger

__all__ = ["TensorBoardLogger"]
__version__ = "0.1.0"

_WHERE = {"TensorBoardLogger": "fabric_core_tensorboard.logger"}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
