"""Lightning's ``plugins.precision.amp`` path: automatic mixed precision (``16-mixed``, ``bf16-mixed``)."""

from __future__ import annotations

from fabric_core.precision.mixed import MixedPrecision

__all__ = ["MixedPrecision"]
