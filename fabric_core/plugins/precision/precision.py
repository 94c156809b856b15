"""Lightning's ``plugins.precision.precision`` path: the base precision class."""

from __future__ import annotations

from fabric_core.precision.precision import Precision

__all__ = ["Precision"]
