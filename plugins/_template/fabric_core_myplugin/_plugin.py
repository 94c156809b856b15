"""Registration only: names and string targets. No torch import here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import hookimpl

if TYPE_CHECKING:
    from fabric_core.plugin_api import Registry


@hookimpl
def fabric_core_register_callbacks(registry: Registry) -> None:
    registry.add(
        "loss_history",
        "fabric_core_myplugin.callback:LossHistory",
        description="Records every loss passed to fabric.call('on_train_batch_end', loss=...).",
    )
