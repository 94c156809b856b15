"""Lightning-style import paths (``from fabric_core.strategies import DDPStrategy``) without eager imports.

Each public package gets a PEP 562 ``__getattr__`` that first looks at the core's own classes and then asks
the catalog for an entry whose target class has the requested name, so an installed plugin's classes
appear under the familiar path without the core naming any plugin.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["class_getattr", "submodule"]


def submodule(package: str, name: str) -> Any:
    """Import ``package.name`` for an attribute access (``fabric_core.strategies.fsdp``).

    Raises:
        AttributeError: There is no such module, with the reason (e.g. the ``pip install`` hint) when one is
            known; an ``AttributeError`` so that ``hasattr`` and ``getattr(..., default)`` keep working.
    """
    if name.startswith("_") or not name.isidentifier():
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    full = f"{package}.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as exc:
        if exc.name != full:
            raise  # the submodule exists but something it imports does not
        detail = "" if str(exc) == f"No module named {full!r}" else f" ({exc})"  # e.g. how to install it
        raise AttributeError(f"module {package!r} has no attribute {name!r}{detail}") from exc


def class_getattr(
    package: str, kinds: tuple[str, ...], local: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build ``__getattr__`` and ``__dir__`` for ``package``.

    Args:
        package: The package's ``__name__``.
        kinds: Catalog kinds whose classes this package exposes.
        local: ``{class name: module}`` for the core's own classes.
    """

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        module = local.get(name)
        if module is not None:
            return getattr(importlib.import_module(module), name)
        if name.islower():  # a module path (``strategies.fsdp``); classes are CamelCase
            return submodule(package, name)
        from fabric_core._manager import get_manager

        catalog = get_manager().catalog
        entries = [e for e in catalog.by_class_name(name) if e.kind in kinds]
        targets = {e.target for e in entries}
        if len(targets) == 1:
            return entries[0].load()
        if len(targets) > 1:
            raise AttributeError(
                f"{package}.{name} is ambiguous: {', '.join(sorted(targets))}. Import it from its plugin instead."
            )
        known = sorted({*local, *(e.class_name for e in catalog.entries() if e.kind in kinds)})
        raise AttributeError(
            f"module {package!r} has no attribute {name!r}. Classes available here with the installed plugins: "
            f"{', '.join(known)}. `fabric-core list-plugins` shows what is installed."
        )

    def __dir__() -> list[str]:
        from fabric_core._manager import get_manager

        catalog = get_manager().catalog
        return sorted({*local, *(e.class_name for e in catalog.entries() if e.kind in kinds)})

    return __getattr__, __dir__
