"""Registration of the MLflow logger: strings only, so discovery never imports mlflow."""

from __future__ import annotations

from fabric_core.plugin_api import component, registers

fabric_core_register_loggers = registers(
    component(
        "mlflow",
        "fabric_core_mlflow.logger:MLFlowLogger",
        description="Log metrics, hyperparameters, tags and artifacts to an MLflow tracking store (rank 0).",
        requires=("mlflow>=2.12",),
    )
)
