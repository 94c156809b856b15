"""Lightning's ``plugins.precision.double`` path."""

from __future__ import annotations

from fabric_core.precision.double import DoublePrecision

__all__ = ["DoublePrecision"]
