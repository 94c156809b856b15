"""bitsandbytes quantization for fabric-core: ``Fabric(precision="nf4")`` and the other modes.

The precision module imports torch (and bitsandbytes when built), so it is loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from fabric_core_bitsandbytes.precision import BitsandbytesPrecision

__all__ = ["BitsandbytesPrecision"]
__version__: Final = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "BitsandbytesPrecision":
        from fabric_core_bitsandbytes.precision import BitsandbytesPrecision

        return BitsandbytesPrecision
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
