"""Lightning's module paths whose classes live in plugins: ``import fabric_core.strategies.ddp``.

A plugin declares them in ``fabric_core_register_modules`` (``"strategies.ddp"`` -> ``"fabric_core_ddp.ddp"``).
:class:`fabric_core._AliasFinder` (defined in the package, to keep ``import fabric_core`` small) sits at the end
of ``sys.meta_path``, after the normal finders, so a module the core
really has always wins; only a miss under ``fabric_core.`` reaches it, and it then reads the declarations
from the default plugin manager (discovery imports no torch and happens once). The alias is the plugin's
module object itself, so ``fabric_core.strategies.ddp.DDPStrategy is fabric_core_ddp.ddp.DDPStrategy``.

A path that a first-party plugin would provide but that no loaded plugin declares still imports, as Lightning's
modules import without their hardware or package: :mod:`.absent_plugins` builds it with Lightning's names,
which report the hardware absent and fail only when used, saying how to get the plugin (``pip install`` when it
is not installed, or why an installed one did not load: blocked, failed).
"""

from __future__ import annotations

import importlib
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

    from fabric_core._kernel.registry import Catalog

__all__ = ["find_spec", "resolve"]

PREFIX: Final = "fabric_core."


class _AliasLoader:
    """Loads an alias as the plugin's module object itself (no second copy of the module)."""

    def __init__(self, module: str, plugin: str) -> None:
        self.module = module
        self.plugin = plugin
        self._original: Any = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        try:
            module = importlib.import_module(self.module)
        except Exception as exc:
            absent = _absent_instead(spec.name, f"its module {self.module!r} failed to import: {exc!r}")
            if absent is not None:
                return absent  # a Lightning path still imports, as Lightning's does without its package
            if isinstance(exc, ImportError):
                raise
            raise ImportError(
                f"{spec.name} is provided by the fabric-core plugin {self.plugin!r} as {self.module!r}, which "
                f"failed to import: {exc!r}",
                name=spec.name,
            ) from exc
        # The import system sets __spec__ on the module it is given; keep the module's own (restored below).
        self._original = module.__spec__
        _serve_lightning_reexports(module, spec.name)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._original  # the module was executed by its own import already


def _serve_lightning_reexports(module: ModuleType, path: str) -> None:
    """Let the plugin's module answer the names Lightning's module at ``path`` re-exports from its others.

    ``from lightning.fabric.strategies.fsdp import _lazy_load`` reaches the FSDP plugin's module; the helper
    lives in the core (:mod:`.reexported_names` says where), so the plugin need not import it.
    A ``__getattr__`` the plugin's module has of its own is asked for every other name.
    """
    from fabric_core._deferred import lightning_reexports
    from fabric_core._lightning.paths.reexported_names import REEXPORTS

    if path not in REEXPORTS or getattr(module, "_fabric_core_lightning_path", None) == path:
        return
    module.__getattr__ = lightning_reexports(path, fallback=vars(module).get("__getattr__"))  # type: ignore[method-assign]
    module._fabric_core_lightning_path = path  # type: ignore[attr-defined]


def resolve(fullname: str, catalog: Catalog, *, autoload: bool = True) -> ModuleSpec | None:
    """The spec for ``fullname`` if a plugin declares it (or would, for an absent first-party plugin), else ``None``.

    Raises:
        ImportError: Two plugins declare the path as different modules.
    """
    from fabric_core.errors import FIRST_PARTY_MODULES

    path = fullname.removeprefix(PREFIX)
    declared = catalog.modules.get(path, ())
    targets = sorted({d.module for d in declared})
    if len(targets) > 1:
        who = ", ".join(sorted(f"{d.plugin!r} ({d.module})" for d in declared))
        raise ImportError(
            f"{fullname} is declared by more than one fabric-core plugin: {who}. Import the plugin's module "
            "directly, or block one of them with FABRIC_CORE_BLOCK_PLUGINS.",
            name=fullname,
        )
    if declared:
        # A duck-typed loader: importlib.abc is not imported at `import fabric_core` (it costs startup time).
        loader = cast("Loader", _AliasLoader(declared[0].module, declared[0].plugin))
        return ModuleSpec(fullname, loader, origin=declared[0].module)
    dist = FIRST_PARTY_MODULES.get(path)
    if dist is None:
        return None
    why = catalog.unavailable.get(dist)
    if why is None and not autoload:
        why = "Plugins are not loaded here (FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD is set)."
    return ModuleSpec(fullname, cast("Loader", _AbsentLoader(dist, why)), origin=f"absent plugin {dist}")


def _absent_instead(fullname: str, why: str) -> ModuleType | None:
    """The stand-in of a first-party plugin's Lightning path whose module cannot be imported here (a torch
    built without ``torch.distributed``, a missing dependency), or ``None`` for any other path."""
    from fabric_core._lightning.paths.absent_names import ABSENT_NAMES
    from fabric_core.errors import FIRST_PARTY_MODULES

    path = fullname.removeprefix(PREFIX)
    if path not in ABSENT_NAMES:
        return None
    from fabric_core._lightning.paths.absent_plugins import absent_module
    from fabric_core._logging import log_event

    log_event("plugin_module_absent", level="warning", path=fullname, reason=why)
    return absent_module(fullname, FIRST_PARTY_MODULES[path], why)


class _AbsentLoader:
    """Loads a first-party plugin's path while that plugin is absent (:mod:`.absent_plugins`)."""

    def __init__(self, dist: str, why: str | None) -> None:
        self.dist = dist
        self.why = why

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        from fabric_core._lightning.paths.absent_plugins import absent_module

        return absent_module(spec.name, self.dist, self.why)

    def exec_module(self, module: ModuleType) -> None:
        pass  # built complete by create_module


def find_spec(fullname: str) -> ModuleSpec | None:
    """What :class:`fabric_core._AliasFinder` answers for ``fullname`` (under ``fabric_core.``)."""
    from fabric_core._kernel.manager import get_manager

    manager = get_manager()
    return resolve(fullname, manager.catalog, autoload=manager.autoload)
