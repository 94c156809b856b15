"""Lightning's ``strategies.launchers.subprocess_script`` path (Lightning's class is ``_SubprocessScriptLauncher``).

Besides the launcher, Lightning's module has the helpers lightning.pytorch's own script launcher builds on: the
child command (plain and under Hydra) and a thread that stops every process when one child fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from fabric_core._deferred import lightning_reexports
from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher, script_command
from fabric_core.utilities._requirements import RequirementCache

_SubprocessScriptLauncher = SubprocessScriptLauncher


_HYDRA_AVAILABLE = RequirementCache("hydra-core")


def _basic_subprocess_cmd() -> list[str]:
    """The command that runs this program again (Lightning's name; see ``script_command``)."""
    return script_command()


def _hydra_subprocess_cmd(local_rank: int) -> tuple[list[str], str]:
    """The command that runs this Hydra app again for ``local_rank``, and the directory to run it in.

    The child writes to the parent's run directory, under a job name of its own, and writes no config files.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd, to_absolute_path

    import __main__

    if __main__.__spec__ is None:
        command = [sys.executable, to_absolute_path(sys.argv[0])]
    else:
        command = [sys.executable, "-m", __main__.__spec__.name]
    command += sys.argv[1:]
    run_dir = f'"{HydraConfig.get().run.dir}"'
    # One run directory for all; each child's own job name; no config files written by the children.
    command += [f"hydra.run.dir={run_dir}", f"hydra.job.name=train_ddp_process_{local_rank}"]
    command += ["hydra.output_subdir=null"]
    return command, get_original_cwd()


class _ChildProcessObserver(threading.Thread):
    """Polls the child processes every ``sleep_period`` seconds; when one fails, kills them all and this process.

    SIGKILL (SIGTERM on Windows): a process blocked in a collective does not react to anything milder.
    """

    def __init__(self, main_pid: int, child_processes: list[subprocess.Popen[Any]], sleep_period: float = 5) -> None:
        super().__init__(daemon=True, name="child-process-observer")
        self._main_pid = main_pid
        self._child_processes = child_processes
        self._sleep_period = sleep_period
        self._termination_signal = signal.SIGTERM if sys.platform == "win32" else signal.SIGKILL
        self._finished = False

    def run(self) -> None:
        while not self._finished:
            time.sleep(self._sleep_period)
            self._finished = self._run()

    def _run(self) -> bool:
        """Look once at every child: ``True`` when there is nothing left to watch (all done, or one failed)."""
        codes = [child.poll() for child in self._child_processes]
        if all(code == 0 for code in codes):
            return True
        for local_rank, (child, code) in enumerate(zip(self._child_processes, codes), start=1):
            if code:
                sys.stderr.write(
                    f"[rank: {local_rank}] child process {child.pid} exited with code {code}; "
                    "stopping every other process of the job.\n"
                )
                self._terminate_all()
                return True
        return False

    def _terminate_all(self) -> None:
        for child in self._child_processes:
            child.send_signal(self._termination_signal)
        os.kill(self._main_pid, self._termination_signal)


def _launch_process_observer(child_processes: list[subprocess.Popen[Any]]) -> None:
    """Start a :class:`_ChildProcessObserver` for ``child_processes`` next to this (the main) process."""
    _ChildProcessObserver(main_pid=os.getpid(), child_processes=child_processes).start()

__all__ = ["SubprocessScriptLauncher", "_SubprocessScriptLauncher"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
