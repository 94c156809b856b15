"""Registration of the TensorBoard logger: strings only, so discovery never imports torch."""

from __future__ import annotations

from fabric_core.plugin_api import component, module_paths, registers

fabric_core_register_loggers = registers(
    component(
        "tensorboard",
        "fabric_core_tensorboard.logger:TensorBoardLogger",
        description="Write scalars, hyperparameters and graphs as TensorBoard event files.",
        # `loggers="tensorboard"` writes under ./lightning_logs/version_N, as "csv" does.
        defaults={"root_dir": "."},
        requires=("tensorboard",),
    )
)
#: The Lightning path of the TensorBoard logger (``fabric_core.loggers.tensorboard``).
fabric_core_register_modules = module_paths({"loggers.tensorboard": "fabric_core_tensorboard.logger"})
