"""Accelerators: the core's CPU accelerator, every installed plugin's by class name, and the helpers
accelerator plugins export (``find_usable_cuda_devices`` from the CUDA plugin)."""

from __future__ import annotations

from typing import Any

from fabric_core._lightning.paths.package_classes import class_getattr

_classes, __dir__ = class_getattr(
    __name__,
    ("accelerator",),
    {
        "Accelerator": "fabric_core.accelerators.accelerator",
        "CPUAccelerator": "fabric_core.accelerators.cpu",
        "ACCELERATOR_REGISTRY": "fabric_core.accelerators.registry",
    },
)


def __getattr__(name: str) -> Any:
    try:
        return _classes(name)
    except AttributeError as missing:
        if name.startswith("__"):
            raise
        from fabric_core._kernel.catalog_view import plugin_export
        from fabric_core.errors import install_hint

        try:
            return plugin_export(name, "accelerator")
        except AttributeError:
            hint = install_hint("function", name)
            if hint is None:
                raise missing from None
            raise AttributeError(
                f"module {__name__!r} has no attribute {name!r}: it comes with an accelerator plugin that is not "
                f"installed. Run `{hint}`."
            ) from None
