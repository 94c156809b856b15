"""``fabric_core.plugins.collectives``: collective operations on process groups (Lightning's path).

Submodules, as in Lightning: ``collective`` (``Collective``), ``single_device``
(``SingleDeviceCollective``) and ``torch_collective`` (``TorchCollective``); ``CollectibleGroup`` comes from
``fabric_core.utilities.types``. Names load on first use, so ``import fabric_core.plugins.collectives`` imports
no torch.
"""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr

__getattr__, __dir__ = class_getattr(
    __name__,
    (),
    {
        "CollectibleGroup": "fabric_core.utilities.types",
        "Collective": "fabric_core.plugins.collectives.collective",
        "SingleDeviceCollective": "fabric_core.plugins.collectives.single_device",
        "TorchCollective": "fabric_core.plugins.collectives.torch_collective",
    },
)
