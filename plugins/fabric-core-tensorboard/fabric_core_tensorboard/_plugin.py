"""Registration of the TensorBoard logger: strings only, so discovery never imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import hookimpl

if TYPE_CHECKING:
    from fabric_core.plugin_api import ModuleRegistry, Registry


@hookimpl
def fabric_core_register_loggers(registry: Registry) -> None:
    """Register ``"tensorboard"``."""
    registry.add(
        "tensorboard",
        "fabric_core_tensorboard.logger:TensorBoardLogger",
        description="Write scalars, hyperparameters and graphs as TensorBoard event files.",
        # `loggers="tensorboard"` writes under ./lightning_logs/version_N, as "csv" does.
        defaults={"root_dir": "."},
        requires=("tensorboard",),
    )


@hookimpl
def fabric_core_register_modules(registry: ModuleRegistry) -> None:
    """The Lightning path of the TensorBoard logger (``fabric_core.loggers.tensorboard``)."""
    registry.add("loggers.tensorboard", "fabric_core_tensorboard.logger")
