"""Lightning's ``connector`` path.

Lightning resolves ``Fabric(...)`` arguments in its private ``_Connector``; fabric-core does it in
:mod:`fabric_core._selection`, through the plugins' selection hooks (``fabric-core explain`` shows the
result). The module exists so that code importing the path keeps importing; its public names are the two
registries Lightning's module imports (read views over the plugin catalog, loaded on first access).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core._deferred import reexports

if TYPE_CHECKING:
    from fabric_core.accelerators.registry import ACCELERATOR_REGISTRY
    from fabric_core.strategies.registry import STRATEGY_REGISTRY

__all__ = ["ACCELERATOR_REGISTRY", "STRATEGY_REGISTRY"]

__getattr__ = reexports(
    __name__,
    {
        "ACCELERATOR_REGISTRY": "fabric_core.accelerators.registry",
        "STRATEGY_REGISTRY": "fabric_core.strategies.registry",
    },
)
