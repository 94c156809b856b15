"""MLflow logger for fabric-core.

The logger module imports mlflow, so it is loaded on first access of :class:`MLFlowLogger`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_mlflow.logger import MLFlowLogger

__all__ = ["MLFlowLogger"]
__version__ = "0.1.0"

_WHERE = {"MLFlowLogger": "fabric_core_mlflow.logger"}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
