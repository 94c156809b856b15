"""Accelerators: the core's CPU accelerator, and every installed plugin's by class name."""

from __future__ import annotations

from fabric_core._lazy import class_getattr

__getattr__, __dir__ = class_getattr(
    __name__,
    ("accelerator",),
    {"Accelerator": "fabric_core.accelerators.accelerator", "CPUAccelerator": "fabric_core.accelerators.cpu"},
)
