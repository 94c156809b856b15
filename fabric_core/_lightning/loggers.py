"""Zero-edit mode's logger names: fabric-core's log records carry Lightning's names (``lightning.fabric.*``).

A program written for Lightning configures logging by Lightning's names
(``logging.getLogger("lightning.fabric").setLevel(logging.ERROR)``), and its tests capture records by them
(``caplog.at_level(logging.INFO, logger="lightning.fabric.utilities.rank_zero")``). In zero-edit mode the modules
are fabric_core's, whose loggers are named after their modules (``fabric_core.utilities.rank_zero``); so
:func:`serve_lightning_names` makes the logging manager hand out the logger of Lightning's name for each of
ours: ``getLogger("fabric_core.X")``, ``getLogger("lightning_fabric.X")`` and ``getLogger("lightning.fabric.X")`` are
one logger, named ``lightning.fabric.X``, under the ``lightning.fabric`` logger. The component folders that
Lightning keeps elsewhere take Lightning's folder (``fabric_core.environments._scheduled`` logs as
``lightning.fabric.plugins.environments._scheduled``, under the logger Lightning's environments log to), and a
plugin's module that a Lightning path serves (``fabric_core_ddp.ddp`` for ``strategies.ddp``) logs under that
path's name too.

Only in zero-edit mode, which the user turns on: outside it, fabric-core's loggers keep their own names.
Loggers created before the mode was turned on keep theirs (the mode starts before the program's imports).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

__all__ = ["lightning_name", "serve_lightning_names"]

#: The package name Lightning's records use (the unified ``lightning`` package's).
LIGHTNING: Final = "lightning.fabric"
_PREFIXES: Final = ("fabric_core", "lightning_fabric")
#: fabric_core's component folders whose modules Lightning keeps in another package: ``{ours: Lightning's}``.
_FOLDERS: Final = {
    "environments": "plugins.environments",
    "io": "plugins.io",
    "launchers": "strategies.launchers",
    "precision": "plugins.precision",
}
_plugin_paths: dict[str, str] | None = None
_resolving = threading.local()


def _plugin_modules() -> dict[str, str]:
    """``{plugin module: Lightning path}`` for the modules plugins declare at Lightning's paths."""
    global _plugin_paths
    if _plugin_paths is None:
        if getattr(_resolving, "active", False):
            return {}  # discovery itself is asking for a logger: answer with the name as it is
        _resolving.active = True
        try:
            from fabric_core._kernel.manager import get_manager

            modules = get_manager().catalog.modules
            _plugin_paths = {d.module: path for path, ds in modules.items() for d in ds}
        finally:
            _resolving.active = False
    return _plugin_paths


def lightning_name(name: str) -> str:
    """The name Lightning's record for the logger ``name`` has (``name`` itself when it is not ours)."""
    if name.startswith("fabric_core."):
        folder, dot, rest = name[len("fabric_core.") :].partition(".")
        if folder in _FOLDERS:
            return f"{LIGHTNING}.{_FOLDERS[folder]}{dot}{rest}"
    for prefix in _PREFIXES:
        if name == prefix or name.startswith(prefix + "."):
            return LIGHTNING + name[len(prefix) :]
    if name.startswith("fabric_core_"):
        path = _plugin_modules().get(name)
        if path is not None:
            return f"{LIGHTNING}.{path}"
    return name


def serve_lightning_names(manager: logging.Manager | None = None) -> None:
    """Make ``manager`` (logging's own by default) hand out loggers by Lightning's names; a second call does
    nothing."""
    manager = manager or logging.Logger.manager
    get_logger: Callable[[str], logging.Logger] = manager.getLogger
    if getattr(get_logger, "fabric_core_lightning_names", False):
        return

    def getLogger(name: str) -> logging.Logger:  # the method it stands for keeps its name
        return get_logger(lightning_name(name) if isinstance(name, str) else name)

    getLogger.fabric_core_lightning_names = True  # type: ignore[attr-defined]
    manager.getLogger = getLogger  # type: ignore[method-assign]
