"""fabric-core: scale a PyTorch training loop with the Lightning Fabric API, as a plugin microkernel.

``import fabric_core`` imports neither torch nor any plugin: every public name is loaded on first use. It
installs one import hook (:mod:`fabric_core._lightning.paths.plugin_modules`) so that Lightning's module paths whose
classes live in plugins (``fabric_core.strategies.ddp``) import as the plugin's module.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, Final

from fabric_core._version import __version__

__all__ = [
    "AmbiguousNameError",
    "Catalog",
    "Entry",
    "Fabric",
    "FabricCoreError",
    "IncompatiblePluginError",
    "InvalidConfigError",
    "PluginImportError",
    "PluginLoadError",
    "PluginManager",
    "PluginRecord",
    "Registry",
    "RunCheckpoints",
    "Spec",
    "UnknownNameError",
    "__version__",
    "get_manager",
    "hookimpl",
    "is_wrapped",
    "seed_everything",
    "spec",
]

_LAZY: Final = {
    "Fabric": "fabric_core.fabric",
    "is_wrapped": "fabric_core.wrappers",
    "seed_everything": "fabric_core.utilities.seed",
    "RunCheckpoints": "fabric_core.run_checkpoints",
    "PluginManager": "fabric_core._kernel.manager",
    "PluginRecord": "fabric_core._kernel.manager",
    "get_manager": "fabric_core._kernel.manager",
    "Catalog": "fabric_core._kernel.registry",
    "Entry": "fabric_core._kernel.registry",
    "Registry": "fabric_core._kernel.registry",
    "Spec": "fabric_core._kernel.registry",
    "spec": "fabric_core._kernel.registry",
    "hookimpl": "fabric_core.hookspecs",
    "AmbiguousNameError": "fabric_core.errors",
    "FabricCoreError": "fabric_core.errors",
    "IncompatiblePluginError": "fabric_core.errors",
    "InvalidConfigError": "fabric_core.errors",
    "PluginImportError": "fabric_core.errors",
    "PluginLoadError": "fabric_core.errors",
    "UnknownNameError": "fabric_core.errors",
}

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from fabric_core._kernel.manager import PluginManager, PluginRecord, get_manager
    from fabric_core._kernel.registry import Catalog, Entry, Registry, Spec, spec
    from fabric_core.errors import (
        AmbiguousNameError,
        FabricCoreError,
        IncompatiblePluginError,
        InvalidConfigError,
        PluginImportError,
        PluginLoadError,
        UnknownNameError,
    )
    from fabric_core.fabric import Fabric
    from fabric_core.hookspecs import hookimpl
    from fabric_core.run_checkpoints import RunCheckpoints
    from fabric_core.utilities.seed import seed_everything
    from fabric_core.wrappers import is_wrapped


class _AliasFinder:
    """Import hook for Lightning's module paths that plugins declare (``fabric_core.strategies.ddp``).

    It sits after the normal finders, so it sees only a miss under ``fabric_core.``; the work is in
    :mod:`fabric_core._lightning.paths.plugin_modules`, imported on the first such miss.
    """

    fabric_core_alias_finder: Final = True  # how a second import (a reload) recognises an installed one

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith("fabric_core."):
            return None
        from fabric_core._lightning.paths.plugin_modules import find_spec

        return find_spec(fullname)


if not any(getattr(f, "fabric_core_alias_finder", False) for f in sys.meta_path):
    sys.meta_path.append(_AliasFinder())

# Zero-edit mode serves `lightning.fabric` as this package, and Lightning's import sets this variable: a
# `importlib.reload(lightning.fabric)` after the environment was cleared sets it again, as Lightning's would.
if any(getattr(f, "fabric_core_lightning_imports", False) for f in sys.meta_path):
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

# Lightning's package reads this switch when it is imported; a user who set it (for Lightning or for us) asked
# for the possible-mistake hints to be silenced. Nothing happens unless it is set.
if os.environ.get("POSSIBLE_USER_WARNINGS", "").lower() in ("0", "off"):
    from fabric_core.utilities.warnings import disable_possible_user_warnings

    disable_possible_user_warnings()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if name.startswith("_"):  # `from fabric_core import _private` asks here before it imports the module
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from fabric_core._deferred import lightning_reexports, submodule

        try:
            return lightning_reexports(__name__)(name)  # `disable_possible_user_warnings`, as in Lightning
        except AttributeError:
            # `fabric_core.strategies.fsdp.FSDPStrategy` after a bare `import fabric_core`, as with Lightning
            return submodule(__name__, name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
