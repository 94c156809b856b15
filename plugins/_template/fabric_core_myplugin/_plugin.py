"""Registration only: names and string targets. No torch import here."""

from __future__ import annotations

from fabric_core.plugin_api import component, registers

fabric_core_register_callbacks = registers(
    component(
        "loss_history",
        "fabric_core_myplugin.callback:LossHistory",
        description="Records every loss passed to fabric.call('on_train_batch_end', loss=...).",
    )
)
