"""Lightning-style import paths (``from fabric_core.strategies import DDPStrategy``) without eager imports.

Each public package gets a PEP 562 ``__getattr__`` that first looks at the core's own classes and then asks
the catalog for an entry whose target class has the requested name, so an installed plugin's classes
appear under the familiar path without the core naming any plugin.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fabric_core._deferred import lightning_reexports, submodule

if TYPE_CHECKING:
    from fabric_core._kernel.registry import Catalog

__all__ = ["class_getattr"]


_MISSING: Any = object()


def _declared_export(package: str, name: str, catalog: Catalog) -> Any:
    """``name`` from the ``__all__`` of a plugin module declared at a path under ``package``, else ``_MISSING``.

    Lightning's packages re-export their submodules' classes (``plugins.environments.XLAEnvironment`` from
    ``plugins.environments.xla``); the plugin modules declared at those paths give the same names here. Only
    a name that nothing else provides gets this far, so importing the declared modules costs nothing on the
    usual path.
    """
    prefix = f"{package.removeprefix('fabric_core.')}."
    for path in sorted(p for p in catalog.modules if p.startswith(prefix)):
        for declaration in catalog.modules[path]:
            try:
                module = importlib.import_module(declaration.module)
            except ImportError:
                continue  # a broken plugin module; its own path reports why when imported
            if name in getattr(module, "__all__", ()):
                return getattr(module, name)
    return _MISSING


def _absent_class(package: str, name: str) -> Any:
    """The placeholder of Lightning's class ``name`` from a path under ``package`` whose plugin is absent.

    Lightning's packages have their classes whether or not the hardware or package is there
    (``lightning.fabric.accelerators.TPUAccelerator``); so do ours, as :mod:`.absent_plugins` builds them.
    """
    from fabric_core._lightning.paths.absent_names import ABSENT_NAMES

    prefix = f"{package.removeprefix('fabric_core').lstrip('.')}."
    for path, names in ABSENT_NAMES.items():
        if path.startswith(prefix.lstrip(".")) and names.get(name, "").startswith("class"):
            return getattr(importlib.import_module(f"fabric_core.{path}"), name)
    return _MISSING


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
        from fabric_core._lightning.paths.reexported_names import REEXPORTS

        if name in REEXPORTS.get(package, ()):  # a name Lightning's package re-exports from one of its modules
            try:
                return lightning_reexports(package)(name)
            except ImportError:
                pass  # that module is a plugin's: the catalog below finds the class or says how to get it
        if name.islower():  # a module path (``strategies.fsdp``); classes are CamelCase
            return submodule(package, name)
        from fabric_core._kernel.manager import get_manager

        catalog = get_manager().catalog
        entries = [e for e in catalog.by_class_name(name) if e.kind in kinds]
        targets = {e.target for e in entries}
        if len(targets) == 1:
            return entries[0].load()
        if len(targets) > 1:
            raise AttributeError(
                f"{package}.{name} is ambiguous: {', '.join(sorted(targets))}. Import it from its plugin instead."
            )
        found = _declared_export(package, name, catalog)
        if found is not _MISSING:
            return found
        from fabric_core.errors import FIRST_PARTY_HINTS

        dist = FIRST_PARTY_HINTS.get(("class", name.lower()))
        absent = _absent_class(package, name)
        if absent is not _MISSING:  # a first-party plugin's class at one of Lightning's paths, plugin absent
            return absent
        if dist is not None:  # a first-party plugin's class: say how to get it (or why it did not load)
            how = catalog.unavailable.get(dist) or f"Install it: `pip install {dist}`."
            raise AttributeError(
                f"module {package!r} has no attribute {name!r}: it comes from the plugin {dist}. {how}"
            )
        known = sorted({*local, *(e.class_name for e in catalog.entries() if e.kind in kinds)})
        raise AttributeError(
            f"module {package!r} has no attribute {name!r}. Classes available here with the installed plugins: "
            f"{', '.join(known)}. `fabric-core list-plugins` shows what is installed."
        )

    def __dir__() -> list[str]:
        from fabric_core._kernel.manager import get_manager

        catalog = get_manager().catalog
        return sorted({*local, *(e.class_name for e in catalog.entries() if e.kind in kinds)})

    return __getattr__, __dir__
