"""The version of fabric-core, in a leaf module so that the kernel can read it without importing the package."""

from __future__ import annotations

from typing import Final

__version__: Final = "0.1.0"
