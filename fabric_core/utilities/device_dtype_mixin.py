"""Lightning's ``utilities.device_dtype_mixin`` path.

In Lightning it holds only Lightning's private ``_DeviceDtypeModuleMixin`` (``.device``/``.dtype`` on a
module). A module set up with ``fabric.setup`` is wrapped; its parameters carry the device and dtype. The
module exists so that code importing the path keeps importing.
"""

from __future__ import annotations

__all__: list[str] = []
