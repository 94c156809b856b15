"""bitsandbytes quantization for fabric-core: ``Fabric(precision="nf4")`` and the other modes.

The precision module imports torch (and bitsandbytes when built), so it is loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_bitsandbytes.precision import BitsandbytesPrecision

__all__ = ["BitsandbytesPrecision"]
__version__ = "0.1.0"

_WHERE = {"BitsandbytesPrecision": "fabric_core_bitsandbytes.precision"}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
