"""Registration of the Weights & Biases logger: strings only, so discovery never imports wandb."""

from __future__ import annotations

from fabric_core.plugin_api import component, registers

fabric_core_register_loggers = registers(
    component(
        "wandb",
        "fabric_core_wandb.logger:WandbLogger",
        description="Log metrics, hyperparameters (as config) and artifacts to one Weights & Biases run (rank 0).",
        requires=("wandb>=0.17",),
    )
)
