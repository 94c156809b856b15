"""``ACCELERATOR_REGISTRY``: Lightning's accelerator registry, as a read-only view of the plugin catalog."""

from __future__ import annotations

from typing import Final

from fabric_core._catalog_view import CatalogView
from fabric_core._deferred import lightning_reexports

__all__ = ["ACCELERATOR_REGISTRY"]


class _AcceleratorRegistry(CatalogView):
    """Every accelerator name ``Fabric(accelerator=...)`` accepts, with its class and description."""

    def available_accelerators(self) -> set[str]:
        """The names (aliases included) of every registered accelerator."""
        return set(self)


ACCELERATOR_REGISTRY: Final = _AcceleratorRegistry("accelerator", "Registered Accelerators")

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
