"""TPUs for fabric-core: ``Fabric(accelerator="tpu")`` (alias ``"xla"``), strategies ``xla``, ``single_xla``,
``xla_fsdp``, and their precision and checkpoint I/O, through torch_xla.

Every name is loaded on first access, so importing this package imports neither torch nor torch_xla.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_xla.accelerator import TPUAccelerator, XLAAccelerator
    from fabric_core_xla.checkpoint_io import XLACheckpointIO
    from fabric_core_xla.environment import XLAEnvironment
    from fabric_core_xla.fsdp import XLAFSDPStrategy
    from fabric_core_xla.launcher import XLALauncher
    from fabric_core_xla.precision import TPUBf16Precision, TPUPrecision, XLABf16Precision, XLAPrecision
    from fabric_core_xla.single_device import SingleDeviceXLAStrategy, SingleTPUStrategy
    from fabric_core_xla.strategy import XLAStrategy

__all__ = [
    "SingleDeviceXLAStrategy",
    "SingleTPUStrategy",
    "TPUAccelerator",
    "TPUBf16Precision",
    "TPUPrecision",
    "XLAAccelerator",
    "XLABf16Precision",
    "XLACheckpointIO",
    "XLAEnvironment",
    "XLAFSDPStrategy",
    "XLALauncher",
    "XLAPrecision",
    "XLAStrategy",
]
__version__ = "0.1.0"

_WHERE = {
    "SingleDeviceXLAStrategy": "fabric_core_xla.single_device",
    "SingleTPUStrategy": "fabric_core_xla.single_device",
    "TPUAccelerator": "fabric_core_xla.accelerator",
    "TPUBf16Precision": "fabric_core_xla.precision",
    "TPUPrecision": "fabric_core_xla.precision",
    "XLABf16Precision": "fabric_core_xla.precision",
    "XLAAccelerator": "fabric_core_xla.accelerator",
    "XLACheckpointIO": "fabric_core_xla.checkpoint_io",
    "XLAEnvironment": "fabric_core_xla.environment",
    "XLAFSDPStrategy": "fabric_core_xla.fsdp",
    "XLALauncher": "fabric_core_xla.launcher",
    "XLAPrecision": "fabric_core_xla.precision",
    "XLAStrategy": "fabric_core_xla.strategy",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
