"""Precision plugins, cluster environments and checkpoint I/O under Lightning's ``plugins`` import path."""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr
from fabric_core.plugins._paths import ENVIRONMENTS, IO, PRECISIONS

__getattr__, __dir__ = class_getattr(__name__, ("precision", "environment"), {**PRECISIONS, **ENVIRONMENTS, **IO})
