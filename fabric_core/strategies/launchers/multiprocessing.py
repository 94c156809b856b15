"""Lightning's ``strategies.launchers.multiprocessing`` path (Lightning's class is ``_MultiProcessingLauncher``)."""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.launchers.multiprocessing import (
    GlobalState,
    MultiProcessingLauncher,
    _unshare_module_memory,
    check_can_fork,
    check_main_guard,
)

# Lightning's private names for the launcher and its checks.
_MultiProcessingLauncher = MultiProcessingLauncher
_GlobalStateSnapshot = GlobalState
_check_bad_cuda_fork = check_can_fork
_check_missing_main_guard = check_main_guard
_disable_module_memory_sharing = _unshare_module_memory

__all__ = ["GlobalState", "MultiProcessingLauncher", "_MultiProcessingLauncher"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
