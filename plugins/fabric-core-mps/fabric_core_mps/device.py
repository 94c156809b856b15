"""Whether Apple's Metal Performance Shaders (MPS) backend can run here.

:func:`is_available` is the one function tests patch to pretend a machine is an Apple silicon Mac.
"""

from __future__ import annotations

import os
import platform

__all__ = ["is_available"]


def is_available() -> bool:
    """Return whether MPS can be used: an arm64 Mac whose torch has MPS, unless ``DISABLE_MPS=1``.

    Intel Macs with an AMD GPU report MPS too, but torch's kernels there are incomplete; like Lightning,
    only Apple silicon counts. Never raises.
    """
    if os.environ.get("DISABLE_MPS", "0").strip() == "1":
        return False
    if platform.system() != "Darwin" or platform.machine() not in ("arm64", "arm"):
        return False
    try:
        import torch

        return bool(torch.backends.mps.is_available())
    except Exception:
        return False
