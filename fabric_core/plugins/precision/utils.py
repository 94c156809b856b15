"""Lightning's ``plugins.precision.utils`` path: helpers precision classes share (Lightning's are private)."""

from __future__ import annotations

from fabric_core.precision.precision import convert_floating_tensors, default_dtype

__all__ = ["convert_floating_tensors", "default_dtype"]
