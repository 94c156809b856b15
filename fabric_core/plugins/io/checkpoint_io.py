"""Lightning's ``plugins.io.checkpoint_io`` path."""

from __future__ import annotations

from fabric_core.io.checkpoint_io import CheckpointIO

__all__ = ["CheckpointIO"]
