"""Lightning's ``plugins.precision.half`` path."""

from __future__ import annotations

from fabric_core.precision.half import HalfPrecision

__all__ = ["HalfPrecision"]
