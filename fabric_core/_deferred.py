"""Module attributes imported on first access (PEP 562 ``__getattr__``): a leaf that imports nothing of ours.

Lightning's import paths whose names live elsewhere in fabric-core (``utilities.distributed``, ``connector``,
``cli``) and ``fabric_core.<submodule>`` attribute access use these, so importing those paths stays light.
Any layer may use it; the catalog-aware package attributes are in :mod:`fabric_core._lazy`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["reexports", "submodule"]


def reexports(module: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name of ``where`` (``{name: source module}``) on first access.

    For Lightning paths whose names live elsewhere in fabric-core, so that importing the path stays light.
    """

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return getattr(importlib.import_module(source), name)

    return __getattr__


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
