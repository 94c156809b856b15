"""The launcher interface: how the processes of a multi-process strategy come to exist."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Final

__all__ = ["START_METHODS", "FunctionLauncher", "Launcher"]

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


class FunctionLauncher(Launcher):
    """A launcher that runs the function given to ``fabric.launch(fn)`` in processes it starts with a
    ``multiprocessing`` start method (its ``start_method``: ``"spawn"``, ``"fork"`` or ``"forkserver"``)."""

    start_method: str

    @property
    def _start_method(self) -> str:
        """Lightning's name for :attr:`start_method`."""
        return self.start_method

    @property
    def is_interactive_compatible(self) -> bool:
        return self.start_method == "fork"

    @property
    def requires_function(self) -> bool:
        return True


#: Lightning's name for the class at this module's Lightning path (``strategies.launchers.launcher``).
_Launcher = Launcher
