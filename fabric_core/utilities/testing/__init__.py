"""Lightning's ``utilities.testing`` path: ``_runif_reasons``, which test suites build skip markers on.

fabric-core's own helpers for plugin authors are in :mod:`fabric_core.testing`.
"""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.utilities.testing._runif import _runif_reasons

__all__ = ["_runif_reasons"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
