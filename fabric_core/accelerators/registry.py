"""``ACCELERATOR_REGISTRY``: Lightning's accelerator registry, as a view of the plugin catalog that code may add to."""

from __future__ import annotations

from typing import Final

from fabric_core._deferred import lightning_reexports
from fabric_core._kernel.catalog_view import CatalogView, NameRegistry
from fabric_core.utilities.exceptions import MisconfigurationException

__all__ = ["ACCELERATOR_REGISTRY"]


class _CatalogAccelerators(CatalogView):
    """Every accelerator name ``Fabric(accelerator=...)`` accepts, with its class and description."""

    duplicate_error = MisconfigurationException

    def available_accelerators(self) -> set[str]:
        """The names (aliases included) of every registered accelerator."""
        return set(self)


ACCELERATOR_REGISTRY: Final = _CatalogAccelerators("accelerator", "Registered Accelerators")


class _AcceleratorRegistry(NameRegistry):
    """Lightning's accelerator registry class, for code that keeps a registry of its own (lightning.pytorch)."""

    kind = "accelerator"
    title = "Registered Accelerators"
    duplicate_error = MisconfigurationException

    def available_accelerators(self) -> set[str]:
        """The registered names."""
        return set(self)

    def _available(self) -> set[str]:
        return self.available_accelerators()

def call_register_accelerators(registry: _AcceleratorRegistry, base_module: str) -> None:
    """Register every accelerator class of ``base_module`` in ``registry`` through its ``register_accelerators``.

    Lightning's legacy helper, kept for code that still calls it; its registries fill themselves the same way.
    """
    import importlib

    from fabric_core.accelerators.accelerator import Accelerator
    from fabric_core.utilities.registry import _register_classes

    _register_classes(registry, "register_accelerators", importlib.import_module(base_module), Accelerator)


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
