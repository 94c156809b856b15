"""Lightning's ``plugins.io.torch_io`` path."""

from __future__ import annotations

from fabric_core.io.torch_io import TorchCheckpointIO

__all__ = ["TorchCheckpointIO"]
