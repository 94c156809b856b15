"""Module attributes imported on first access (PEP 562 ``__getattr__``): a leaf that imports nothing of ours.

Lightning's import paths whose names live elsewhere in fabric-core (``utilities.distributed``, ``connector``,
``cli``) and ``fabric_core.<submodule>`` attribute access use these, so importing those paths stays light.
Plugins get the same through :func:`fabric_core.plugin_api.lazy_exports`. Any layer may use it; the catalog-aware
package attributes are in :mod:`fabric_core._lightning.paths.package_classes`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "lightning_reexports", "reexports", "submodule"]


def reexports(
    module: str, where: Mapping[str, str], fallback: Callable[[str], Any] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name of ``where`` on first access.

    For Lightning paths whose names live elsewhere in fabric-core, so that importing the path stays light.

    Args:
        module: The module the ``__getattr__`` is for (named in the ``AttributeError``).
        where: ``{name: source}``; the source is a module path (the same name there) or ``"module:name"``.
        fallback: Asked for names that ``where`` does not list (another ``__getattr__``).
    """

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            if fallback is not None:
                return fallback(name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        source_module, _, source_name = source.partition(":")
        return getattr(importlib.import_module(source_module), source_name or name)

    return __getattr__


def lazy_exports(
    module: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` (PEP 562) for names imported on first access.

    A plugin package exports its classes without importing torch: ::

        __getattr__, __dir__ = lazy_exports(__name__, {"DDPStrategy": "fabric_core_ddp.ddp"})

    Nothing is cached in the package: each access reads the name from its source module, so a name patched
    there is the one the package answers.

    Args:
        module: The package's ``__name__``.
        where: ``{name: source}``; the source is a module path (the same name there) or ``"module:name"``.

    Returns:
        The ``__getattr__`` (an unknown name raises ``AttributeError``) and a ``__dir__`` that lists the
        package's own names and the names of ``where``.
    """

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module]), *where})

    return reexports(module, where), __dir__


def lightning_reexports(module: str, fallback: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """The ``__getattr__`` of a Lightning path: the names Lightning re-exports there from its other modules.

    ``from lightning.fabric.strategies.fsdp import _lazy_load`` works in Lightning because its ``fsdp`` module
    imports that helper; here every such name is served from the one module that implements it, as listed in
    :mod:`fabric_core._lightning.paths.reexported_names`.
    """
    from fabric_core._lightning.paths.reexported_names import REEXPORTS

    return reexports(module, REEXPORTS.get(module, {}), fallback)


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
