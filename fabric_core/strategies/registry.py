"""``STRATEGY_REGISTRY``: Lightning's strategy registry, as a view of the plugin catalog that code may add to."""

from __future__ import annotations

from typing import Final

from fabric_core._kernel.catalog_view import CatalogView, NameRegistry

__all__ = ["STRATEGY_REGISTRY"]


class _CatalogStrategies(CatalogView):
    """Every strategy name ``Fabric(strategy=...)`` accepts, with its class, arguments and description."""

    def available_strategies(self) -> list[str]:
        """The names (aliases included) of every registered strategy."""
        return list(self)


STRATEGY_REGISTRY: Final = _CatalogStrategies("strategy", "Registered Strategies")


class _StrategyRegistry(NameRegistry):
    """Lightning's strategy registry class, for code that keeps a registry of its own (lightning.pytorch)."""

    kind = "strategy"
    title = "Registered Strategies"

    def available_strategies(self) -> list[str]:
        """The registered names."""
        return list(self)
