"""The first code every ``fabric-core run`` worker runs: tie its life to the launcher, then run the script.

torchrun starts each worker as ``python -u -m fabric_core._run.worker SCRIPT ARGS...`` in a session of its
own, so a launcher killed with SIGKILL (which cannot forward anything) would leave the workers running.
This module makes the worker die with the launcher before any user code runs:

- on Linux, ``PR_SET_PDEATHSIG`` asks the kernel for SIGKILL when the parent dies;
- everywhere, a daemon thread checks once per :data:`WATCH_SECONDS` that the parent is still the launcher
  (an orphan is re-parented, so ``os.getppid()`` changes) - the fallback where ``prctl`` does not exist;
- a worker whose launcher died before the above was in place exits at once.

Then the script runs as ``__main__`` with its own ``sys.argv`` and its folder first on ``sys.path``, as
``python SCRIPT`` would run it; in zero-edit mode (``fabric-core run --lightning-imports`` sets
``FABRIC_CORE_LIGHTNING_IMPORTS=1``) after ``lightning_fabric`` and ``lightning.fabric`` are made fabric_core's.
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

from fabric_core._kernel.arguments import LIGHTNING_CLI_ENV

__all__ = [
    "CLI_ENV",
    "LAUNCHER_PID_ENV",
    "LIGHTNING_CLI_ENV",
    "WATCH_SECONDS",
    "launched_by_cli",
    "run_script",
    "tie_to_launcher",
    "watch_parent",
]

#: Set by ``fabric-core run``: the processes exist already and ``Fabric()`` joins them.
CLI_ENV: Final = "FABRIC_CORE_CLI_USED"
#: Set by ``fabric-core run`` to its own PID; every worker's parent is that process.
LAUNCHER_PID_ENV: Final = "FABRIC_CORE_LAUNCHER_PID"
#: How often the fallback watcher looks at the parent.
WATCH_SECONDS: Final = 0.5


def launched_by_cli() -> bool:
    """Whether ``fabric-core run`` started this process (``FABRIC_CORE_CLI_USED=1``), so ``Fabric()`` joins it.

    Lightning's ``fabric run`` (``LT_CLI_USED=1``) counts too: then ``launch()`` and an overridden ``run()`` are
    refused as Lightning refuses them.

    Raises:
        InvalidConfigError: ``FABRIC_CORE_CLI_USED=1`` in a process that no ``fabric-core run`` started (the
            variable leaked into a shell): joining would wait for processes that do not exist, forever.
    """
    if os.environ.get(CLI_ENV) != "1":
        # Lightning's launcher leaves nothing to verify (it records no PID): it is believed, as Lightning does.
        return os.environ.get(LIGHTNING_CLI_ENV) == "1"
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher != str(os.getppid()):
        from fabric_core.errors import InvalidConfigError

        started_by = (
            f"its parent (pid {os.getppid()}) is not the launcher in {LAUNCHER_PID_ENV}={launcher}"
            if launcher
            else f"{LAUNCHER_PID_ENV} is not set"
        )
        raise InvalidConfigError(
            f"{CLI_ENV}=1 is set, but this process was not started by `fabric-core run` ({started_by}), so "
            "the other processes it would wait for do not exist. The variable probably leaked into this shell: "
            f"`unset {CLI_ENV}` (and the other FABRIC_CORE_* variables you did not mean to set), or start the "
            "script with `fabric-core run`.",
            argument=CLI_ENV,
            value=os.environ.get(CLI_ENV),
        )
    return True


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

        _die_with_parent(launcher)
    # Checked after asking for the signal: a launcher that died before that point would never send it.
    if os.getppid() != launcher:
        _die()
    watch_parent(launcher)


def run_script(argv: Sequence[str]) -> None:
    """Run ``argv[0]`` as ``__main__`` with ``argv`` as its ``sys.argv``, as ``python SCRIPT ARGS`` would.

    Args:
        argv: The script's path (a file, or a folder or zip with ``__main__.py``) and its arguments.
    """
    script = os.path.abspath(argv[0])
    sys.argv = [argv[0], *argv[1:]]
    if os.path.isfile(script):
        sys.path[0] = os.path.dirname(script)  # runpy puts a folder or zip on sys.path itself
    runpy.run_path(script, run_name="__main__")


def main(argv: Sequence[str]) -> None:
    """Run ``argv[0]`` as ``__main__`` with ``argv`` as its ``sys.argv``, tied to the launcher."""
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    if launcher.isdigit():
        tie_to_launcher(int(launcher))
    from fabric_core._lightning.alias import ENV, install

    if os.environ.get(ENV) == "1":
        install()
    run_script(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
