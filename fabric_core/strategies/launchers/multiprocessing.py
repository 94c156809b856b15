"""Lightning's ``strategies.launchers.multiprocessing`` path (Lightning's class is ``_MultiProcessingLauncher``)."""

from __future__ import annotations

from fabric_core.launchers.multiprocessing import GlobalState, MultiProcessingLauncher

_MultiProcessingLauncher = MultiProcessingLauncher

__all__ = ["GlobalState", "MultiProcessingLauncher", "_MultiProcessingLauncher"]
