"""``fabric_core.strategies.launchers``: Lightning's path for the launchers (they live in ``fabric_core.launchers``).

Submodules: ``launcher``, ``multiprocessing``, ``subprocess_script`` from the core; ``xla`` from the plugin
that declares it.
"""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr

__getattr__, __dir__ = class_getattr(
    __name__,
    (),
    {
        "Launcher": "fabric_core.strategies.launchers.launcher",
        "_Launcher": "fabric_core.strategies.launchers.launcher",
        "MultiProcessingLauncher": "fabric_core.strategies.launchers.multiprocessing",
        "_MultiProcessingLauncher": "fabric_core.strategies.launchers.multiprocessing",
        "SubprocessScriptLauncher": "fabric_core.strategies.launchers.subprocess_script",
        "_SubprocessScriptLauncher": "fabric_core.strategies.launchers.subprocess_script",
    },
)
