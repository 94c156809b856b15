"""Lightning's ``utilities.registry`` path: its private helpers that fill registries and load callbacks.

fabric-core's own components are registered through :mod:`fabric_core.hookspecs`; these two helpers serve code
written for Lightning: ``_register_classes`` lets each class of a module that overrides a registration method add
itself to a registry, and ``_load_external_callbacks`` collects the callbacks that entry-point factories return.
"""

from __future__ import annotations

import inspect
import logging
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from fabric_core._deferred import lightning_reexports

__all__: list[str] = []

_log = logging.getLogger(__name__)


def _load_external_callbacks(group: str) -> list[Any]:
    """The callbacks that the factories registered as entry points of ``group`` return, in discovery order.

    Each entry point names a function without arguments that returns a callback or a list of them.

    Args:
        group: The entry point group (``"lightning.fabric.callbacks_factory"`` in Lightning).
    """
    callbacks: list[Any] = []
    for factory in entry_points(group=group):
        made = factory.load()()
        made = made if isinstance(made, list) else [made]
        if made:
            _log.info(
                f"Adding {len(made)} callbacks from entry point '{factory.name}': "
                f"{', '.join(type(callback).__name__ for callback in made)}"
            )
        callbacks.extend(made)
    return callbacks


def _register_classes(registry: Any, method: str, module: ModuleType, parent: type[object]) -> None:
    """Call ``cls.<method>(registry)`` for each class of ``module`` that subclasses ``parent`` and overrides it.

    Args:
        registry: What the classes register into.
        method: The name of the registration method (``"register_strategies"``).
        module: The module whose classes are visited, in name order.
        parent: The base class that declares ``method``.

    Raises:
        ValueError: ``parent`` has no ``method``.
    """
    for _, member in inspect.getmembers(module, inspect.isclass):
        if issubclass(member, parent) and _overrides(member, method, parent):
            getattr(member, method)(registry)


def _overrides(cls: type, method: str, parent: type[object]) -> bool:
    own = getattr(cls, method, None)
    if own is None:
        return False
    base = getattr(parent, method, None)
    if base is None:
        raise ValueError("The parent should define the method")
    own, base = inspect.unwrap(own), inspect.unwrap(base)
    return bool(getattr(own, "__code__", own) != getattr(base, "__code__", base))


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
