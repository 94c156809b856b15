"""Strategies: the core's own, and every installed plugin's by class name (``DDPStrategy``, ...)."""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr

__getattr__, __dir__ = class_getattr(
    __name__,
    ("strategy",),
    {
        "Strategy": "fabric_core.strategies.strategy",
        "SingleDeviceStrategy": "fabric_core.strategies.single_device",
        "ParallelStrategy": "fabric_core.strategies.parallel",
        "STRATEGY_REGISTRY": "fabric_core.strategies.registry",
    },
)
