"""The launcher interface: how the processes of a multi-process strategy come to exist."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Final

__all__ = ["START_METHODS", "Launcher"]

#: How ``fabric.launch()`` can start the processes of one node (a strategy's ``start_method``): ``"popen"``
#: runs the script again for each other local rank (``SubprocessScriptLauncher``); the others are
#: ``multiprocessing`` start methods whose workers run the function given to ``fabric.launch(fn)``
#: (``MultiProcessingLauncher``).
START_METHODS: Final = ("popen", "spawn", "fork", "forkserver")


class Launcher(ABC):
    """Starts the processes of a job and runs a function in each."""

    @property
    @abstractmethod
    def is_interactive_compatible(self) -> bool:
        """Whether this launcher works in a notebook or REPL (fork does, re-running a script does not)."""

    @property
    def requires_function(self) -> bool:
        """Whether ``fabric.launch()`` must be given a function (spawn and fork do)."""
        return False

    @abstractmethod
    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the other processes, run ``function(*args, **kwargs)`` in each, return rank 0's result."""


#: Lightning's name for the class at this module's Lightning path (``strategies.launchers.launcher``).
_Launcher = Launcher
