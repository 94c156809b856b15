"""Run fabric-core scripts on a Ray cluster, with Ray Train starting the processes.

``run(...)`` starts a script (or a function) on ``num_workers`` Ray Train workers; ``report(...)`` hands a
checkpoint that ``fabric.save`` wrote to Ray Train's storage. Both import Ray only when called, so importing
this package (which every ``Fabric(...)`` does, for the registration module) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_ray.checkpoint import report
    from fabric_core_ray.environment import RayEnvironment
    from fabric_core_ray.launch import run

__all__ = ["RayEnvironment", "report", "run"]
__version__ = "0.1.0"

_WHERE = {
    "RayEnvironment": "fabric_core_ray.environment",
    "report": "fabric_core_ray.checkpoint",
    "run": "fabric_core_ray.launch",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
