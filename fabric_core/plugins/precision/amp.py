"""Lightning's ``plugins.precision.amp`` path: automatic mixed precision (``16-mixed``, ``bf16-mixed``)."""

from __future__ import annotations

from typing import Any

from fabric_core._deferred import lightning_reexports
from fabric_core.precision.mixed import MixedPrecision

__all__ = ["MixedPrecision"]


def _optimizer_handles_unscaling(optimizer: Any) -> bool:
    """Whether ``optimizer.step`` unscales the gradients itself (torch's fused optimizers say so by a flag).

    The flag (``_step_supports_amp_scaling``) is a torch internal: reliable for torch's own optimizers only.
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
