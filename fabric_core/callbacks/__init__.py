"""Callbacks shipped with the core, selectable by name (``Fabric(callbacks=["throughput"])``)."""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr

__getattr__, __dir__ = class_getattr(
    __name__,
    ("callback",),
    {
        "ThroughputMonitor": "fabric_core.callbacks.throughput",
        "ProgressBar": "fabric_core.callbacks.progress",
        "Profiler": "fabric_core.callbacks.profiler",
    },
)
