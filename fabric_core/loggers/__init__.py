"""Loggers: the core's CSV logger, and every installed plugin's by class name (``TensorBoardLogger``, ...)."""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr

__getattr__, __dir__ = class_getattr(
    __name__,
    ("logger",),
    {"Logger": "fabric_core.loggers.logger", "CSVLogger": "fabric_core.loggers.csv_logs"},
)
