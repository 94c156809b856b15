"""Lightning's ``strategies.launchers.subprocess_script`` path (Lightning's class is ``_SubprocessScriptLauncher``)."""

from __future__ import annotations

from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher

_SubprocessScriptLauncher = SubprocessScriptLauncher

__all__ = ["SubprocessScriptLauncher", "_SubprocessScriptLauncher"]
