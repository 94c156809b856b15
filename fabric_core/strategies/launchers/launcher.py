"""Lightning's ``strategies.launchers.launcher`` path (Lightning's class is ``_Launcher``)."""

from __future__ import annotations

from fabric_core.launchers.launcher import Launcher

_Launcher = Launcher

__all__ = ["Launcher", "_Launcher"]
