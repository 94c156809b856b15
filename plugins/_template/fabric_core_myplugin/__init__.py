"""A fabric-core plugin (template): a callback that records the losses passed to ``fabric.call``."""

from __future__ import annotations

__version__ = "0.1.0"
