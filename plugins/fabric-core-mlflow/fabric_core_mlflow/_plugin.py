"""Registration of the MLflow logger: strings only, so discovery never imports mlflow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import hookimpl

if TYPE_CHECKING:
    from fabric_core.plugin_api import Registry


@hookimpl
def fabric_core_register_loggers(registry: Registry) -> None:
    """Register ``"mlflow"``."""
    registry.add(
        "mlflow",
        "fabric_core_mlflow.logger:MLFlowLogger",
        description="Log metrics, hyperparameters, tags and artifacts to an MLflow tracking store (rank 0).",
        requires=("mlflow>=2.12",),
    )
