"""The first code every ``fabric-core run`` worker runs: tie its life to the launcher, then run the script.

torchrun starts each worker as ``python -u -m fabric_core._run_worker SCRIPT ARGS...`` in a session of its
own, so a launcher killed with SIGKILL (which cannot forward anything) would leave the workers running.
This module makes the worker die with the launcher before any user code runs:

- on Linux, ``PR_SET_PDEATHSIG`` asks the kernel for SIGKILL when the parent dies;
- everywhere, a daemon thread checks once per :data:`WATCH_SECONDS` that the parent is still the launcher
  (an orphan is re-parented, so ``os.getppid()`` changes) - the fallback where ``prctl`` does not exist;
- a worker whose launcher died before the above was in place exits at once.

Then the script runs as ``__main__`` with its own ``sys.argv`` and its folder first on ``sys.path``, as
``python SCRIPT`` would run it.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Final

__all__ = ["LAUNCHER_PID_ENV", "WATCH_SECONDS", "tie_to_launcher", "under_launcher", "watch_parent"]

#: Set by ``fabric-core run`` to its own PID; every worker's parent is that process.
LAUNCHER_PID_ENV: Final = "FABRIC_CORE_LAUNCHER_PID"
#: How often the fallback watcher looks at the parent.
WATCH_SECONDS: Final = 0.5


def under_launcher() -> bool:
    """Whether this process was started by the ``fabric-core run`` named in ``FABRIC_CORE_LAUNCHER_PID``."""
    return os.environ.get(LAUNCHER_PID_ENV) == str(os.getppid())


def _die() -> None:
    # SIGKILL, as the parent-death signal would: the launcher is gone and nobody reads what we print.
    os.kill(os.getpid(), signal.SIGKILL)


def watch_parent(parent: int, interval: float = WATCH_SECONDS) -> threading.Thread:
    """Start a daemon thread that kills this process once its parent is no longer ``parent``.

    Args:
        parent: The PID of the process this one must not outlive.
        interval: Seconds between looks.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        _die()

    thread = threading.Thread(target=watch, name="fabric-core-launcher-watch", daemon=True)
    thread.start()
    return thread


def tie_to_launcher(launcher: int) -> None:
    """Make this process end when ``launcher`` (its parent) ends, however it ends.

    Args:
        launcher: The launcher's PID.
    """
    if sys.platform == "linux":
        from fabric_core.launchers.subprocess_script import _die_with_parent

        _die_with_parent()
    # Checked after asking for the signal: a launcher that died before that point would never send it.
    if os.getppid() != launcher:
        _die()
    watch_parent(launcher)


def main(argv: Sequence[str]) -> None:
    """Run ``argv[0]`` as ``__main__`` with ``argv`` as its ``sys.argv``, tied to the launcher."""
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    if launcher.isdigit():
        tie_to_launcher(int(launcher))
    script = os.path.abspath(argv[0])
    sys.argv = [argv[0], *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
