"""Lightning's ``utilities.device_dtype_mixin`` path: its private ``_DeviceDtypeModuleMixin``.

The mixin gives a module ``.device`` and ``.dtype`` properties that follow ``.to()``; it lives in
:mod:`fabric_core.utilities._device_dtype`, imported on first access so that importing this path stays light.
"""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports, reexports

__all__: list[str] = []

__getattr__ = reexports(
    __name__,
    dict.fromkeys(("_DeviceDtypeModuleMixin", "_update_properties"), "fabric_core.utilities._device_dtype"),
    # Lightning Fabric's names that its own module at this path imports from its other modules.
    fallback=lightning_reexports(__name__),
)
