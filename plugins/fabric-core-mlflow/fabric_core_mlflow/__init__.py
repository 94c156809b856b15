"""MLflow logger for fabric-core.

The logger module imports mlflow, so it is loaded on first access of :class:`MLFlowLogger`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabric_core_mlflow.logger import MLFlowLogger

__all__ = ["MLFlowLogger"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "MLFlowLogger":
        from fabric_core_mlflow.logger import MLFlowLogger

        return MLFlowLogger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
