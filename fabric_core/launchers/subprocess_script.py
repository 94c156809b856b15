"""Start the other local processes by running this process's command again (``strategy="ddp"``).

This module is also Lightning's ``strategies.launchers.subprocess_script`` path, with Lightning's helpers that
lightning.pytorch's own script launcher builds on: the child command (plain and under Hydra) and the thread
that watches the children (``_ChildProcessObserver``), which the launcher here starts too.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from fabric_core.errors import EnvironmentSetupError, InvalidConfigError
from fabric_core.launchers._threads import set_num_threads_if_needed
from fabric_core.launchers.launcher import Launcher
from fabric_core.utilities._requirements import RequirementCache

if TYPE_CHECKING:
    from fabric_core.environments.environment import ClusterEnvironment

__all__ = ["SubprocessScriptLauncher", "script_command"]

#: Lightning's name: whether Hydra is installed (then a child of a Hydra app runs in the app's run directory).
_HYDRA_AVAILABLE = RequirementCache("hydra-core")

# Interpreter options that take a separate value (`python -W error script.py`).
_OPTIONS_WITH_VALUE: Final = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_POLL_SECONDS: Final = 0.1
_GRACE_SECONDS: Final = 3.0
_PR_SET_PDEATHSIG: Final = 1
# `python -m fabric_core.lightning_imports SCRIPT`: the children keep the prefix, so they run in zero-edit mode.
_ZERO_EDIT_RUNNER: Final = "fabric_core.lightning_imports"


class SubprocessScriptLauncher(Launcher):
    """Run the command that started this process again for local ranks ``1 .. num_processes - 1``.

    Each child gets ``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in
    its environment, so the whole script runs once per device and ``fabric.launch()`` needs no function.
    Nothing is started when the cluster environment creates the processes (torchrun, SLURM, ...). Under a
    Hydra app a child runs in the app's original directory and writes to the parent's run directory.

    A :class:`_ChildProcessObserver` watches the children: when one exits non-zero, the others are stopped
    and this process exits with that code within a fraction of a second (the child's traceback is on the
    shared stderr). When this process ends, it waits for the children, and stops them if it is ending on an
    uncaught exception. On Linux the children are also killed if this process dies abruptly.

    Args:
        cluster_environment: Where the address, port and ranks come from.
        num_processes: Processes per node (one per device).
        num_nodes: Number of nodes.
    """

    def __init__(self, cluster_environment: ClusterEnvironment, num_processes: int, num_nodes: int) -> None:
        self.cluster_environment = cluster_environment
        self.num_processes = num_processes
        self.num_nodes = num_nodes
        #: The children started here (local ranks 1 and up); Lightning's name.
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def is_interactive_compatible(self) -> bool:
        return False

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the children (unless the environment already did), then run ``function`` here.

        Raises:
            RuntimeError: This launcher started its children already, or this process is not local rank 0.
        """
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not self.cluster_environment.creates_processes_externally:
            self._call_children_scripts()
        return function(*args, **kwargs)

    def _call_children_scripts(self) -> None:
        """Start local ranks 1 and up (Lightning's name)."""
        self._check_can_spawn_children()
        environment = self.cluster_environment
        os.environ["MASTER_ADDR"] = environment.main_address
        os.environ["MASTER_PORT"] = str(environment.main_port)
        os.environ["NODE_RANK"] = str(environment.node_rank())
        os.environ["LOCAL_RANK"] = str(environment.local_rank())
        os.environ["WORLD_SIZE"] = str(self.num_processes * self.num_nodes)
        set_num_threads_if_needed(self.num_processes)
        for local_rank in range(1, self.num_processes):
            env = {**os.environ, "LOCAL_RANK": str(local_rank)}
            command, cwd = _child_command(local_rank)
            preexec = functools.partial(_die_with_parent, os.getpid()) if sys.platform == "linux" else None
            self.procs.append(subprocess.Popen(command, env=env, cwd=cwd, preexec_fn=preexec))
        if self.procs:
            _ChildProcessObserver(os.getpid(), self.procs, _POLL_SECONDS, graceful=True).start()

    def _check_can_spawn_children(self) -> None:
        """Refuse to start children twice, or from a process that is not local rank 0 (Lightning's name).

        Raises:
            RuntimeError: Either (an ``EnvironmentSetupError`` for the local rank).
        """
        if self.procs:
            raise RuntimeError(
                f"The launcher can only create subprocesses once: it started local ranks 1 to {len(self.procs)} "
                f"already (pids {', '.join(str(p.pid) for p in self.procs)}). Call `fabric.launch()` once per process."
            )
        local_rank = self.cluster_environment.local_rank()
        if local_rank != 0:
            raise EnvironmentSetupError(
                f"fabric-core attempted to launch new distributed processes with `local_rank > 0` (this process has "
                f"local rank {local_rank}, from {type(self.cluster_environment).__name__}): only local rank 0 starts "
                "the others. Possible reasons: LOCAL_RANK was set by hand in this process's environment, or the "
                "cluster environment reports `creates_processes_externally=False` although a launcher started this "
                "process.",
                argument="LOCAL_RANK",
                value=local_rank,
            )


class _ChildProcessObserver(threading.Thread):
    """Watches the child processes from a daemon thread; when one fails, ends the others and this process.

    Lightning's class, which lightning.pytorch's script launcher starts through :func:`_launch_process_observer`:
    every ``sleep_period`` seconds it polls the children, stops when all exited with 0, and on a non-zero exit
    kills every child and this process with SIGKILL (SIGTERM on Windows), since a process blocked in a
    collective reacts to nothing milder.

    fabric-core's launcher starts it with ``graceful=True``: a failure stops the other children with SIGTERM
    (SIGKILL after a grace period) and this process exits with the failed child's code; :meth:`start` also makes
    this process wait for the children when it ends, and stop them when it ends on an uncaught exception.

    Args:
        main_pid: This process (what Lightning's way kills).
        child_processes: The children, local ranks 1 and up.
        sleep_period: Seconds between two looks at the children.
        graceful: fabric-core's way of ending the job, described above.
    """

    def __init__(
        self,
        main_pid: int,
        child_processes: list[subprocess.Popen[Any]],
        sleep_period: float = 5,
        *,
        graceful: bool = False,
    ) -> None:
        super().__init__(daemon=True, name="child-process-observer")
        self._main_pid = main_pid
        self._child_processes = child_processes
        self._sleep_period = sleep_period
        self._termination_signal = signal.SIGTERM if sys.platform == "win32" else signal.SIGKILL
        self._finished = False
        self._graceful = graceful
        self._aborting = threading.Lock()
        self._failed_here = False
        self._original_excepthook: Callable[..., Any] | None = None

    def start(self) -> None:
        """Start watching (and, when graceful, hook this process's exit and uncaught exceptions)."""
        if self._graceful:
            self._original_excepthook = sys.excepthook
            sys.excepthook = self._excepthook
            atexit.register(self._finish)
        super().start()

    def run(self) -> None:
        while not self._finished:
            time.sleep(self._sleep_period)
            self._finished = self._run()

    def _run(self) -> bool:
        """Look once at every child: ``True`` when there is nothing left to watch (all done, or one failed)."""
        for child in self._child_processes:
            child.poll()
        if all(child.returncode == 0 for child in self._child_processes):
            return True
        failed = self._failed_child()
        if failed is None:
            return False
        local_rank, child = failed
        if self._graceful:
            self._abort(local_rank, child)
        else:
            sys.stderr.write(
                f"[rank: {local_rank}] child process {child.pid} exited with code {child.returncode}; "
                "stopping every other process of the job.\n"
            )
            self._terminate_all()
        return True

    def _failed_child(self) -> tuple[int, subprocess.Popen[Any]] | None:
        for local_rank, child in enumerate(self._child_processes, start=1):
            if child.returncode:
                return local_rank, child
        return None

    def _terminate_all(self) -> None:
        """Lightning's way: kill every child and this process."""
        for child in self._child_processes:
            child.send_signal(self._termination_signal)
        os.kill(self._main_pid, self._termination_signal)

    def _abort(self, local_rank: int, child: subprocess.Popen[Any]) -> None:
        if not self._aborting.acquire(blocking=False):
            return  # the observer thread and the exit handler both noticed; one reports
        code = child.returncode
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        sys.stderr.write(
            f"fabric-core: local rank {local_rank} (pid {child.pid}) {how}; stopping the other processes of this job.\n"
        )
        self._stop_children()
        sys.stdout.flush()
        sys.stderr.flush()
        # The main thread may be blocked in a collective that can never complete: exit from here.
        os._exit(code if code > 0 else 128 - code)

    def _stop_children(self) -> None:
        running = [c for c in self._child_processes if c.poll() is None]
        for child in running:
            child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _GRACE_SECONDS
        for child in running:
            try:
                child.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def _excepthook(self, kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
        self._failed_here = True
        hook = self._original_excepthook or sys.__excepthook__
        hook(kind, value, traceback)

    def _finish(self) -> None:
        """At exit: stop the children after a failure here, otherwise wait for them (and their codes)."""
        if self._failed_here:
            self._stop_children()
            return
        while any(child.poll() is None for child in self._child_processes):
            time.sleep(_POLL_SECONDS)
        failed = self._failed_child()
        if failed is not None:
            self._abort(*failed)


def _launch_process_observer(child_processes: list[subprocess.Popen[Any]]) -> None:
    """Start Lightning's :class:`_ChildProcessObserver` for ``child_processes`` next to this (the main) process."""
    _ChildProcessObserver(main_pid=os.getpid(), child_processes=child_processes).start()


def _child_command(local_rank: int) -> tuple[list[str], str | None]:
    """The command that runs local rank ``local_rank``, and the directory to run it in (``None``: this one's)."""
    if _HYDRA_AVAILABLE:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return _hydra_subprocess_cmd(local_rank)
    return _basic_subprocess_cmd(), None


def _basic_subprocess_cmd() -> list[str]:
    """The command that runs this program again (Lightning's name; see :func:`script_command`)."""
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


def script_command(orig_argv: Sequence[str] | None = None) -> list[str]:
    """The command that started this process: the same interpreter, options, script or module, and arguments.

    Args:
        orig_argv: The full command line (default ``sys.orig_argv``).

    Raises:
        InvalidConfigError: The code came from stdin or an interactive session, so it cannot run again.
    """
    argv = list(sys.orig_argv if orig_argv is None else orig_argv)
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-", "-c", "-m"):
        i += 2 if argv[i] in _OPTIONS_WITH_VALUE else 1
    options, rest = argv[1:i], argv[i:]
    runner: list[str] = []
    if rest[:2] == ["-m", _ZERO_EDIT_RUNNER] and len(rest) > 2 and rest[2] != "-m":
        runner, rest = rest[:2], rest[2:]  # zero-edit mode's runner, then a script: made absolute as below
    if not runner and rest and rest[0] in ("-c", "-m") and len(rest) > 1:
        return [sys.executable, *options, *rest]
    if not rest or rest[0] == "-":
        raise InvalidConfigError(
            "`strategy='ddp'` starts the other processes by running this program's command again, but this "
            f"process has no script to run again (command: {' '.join(argv) or '(unknown)'}). Run a script "
            "file, or use `strategy='ddp_spawn'` (or `'ddp_notebook'` in a notebook).",
            argument="strategy",
            value="ddp",
        )
    import __main__

    # Python makes the main script's `__file__` absolute; a relative path would break if the program changed
    # directory before launching.
    script = getattr(__main__, "__file__", None)
    if script is not None and os.path.basename(script) == os.path.basename(rest[0]):
        rest = [script, *rest[1:]]
    else:
        rest = [os.path.abspath(rest[0]), *rest[1:]]
    return [sys.executable, *options, *runner, *rest]


def _die_with_parent(parent: int | None = None) -> None:
    """In the child before exec: get SIGKILL when the parent dies, so no rank outlives a killed job.

    Args:
        parent: The parent's PID: if it died before the signal was asked for (it would never come), this
            process ends here.
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


#: Lightning's name for the launcher at this module's Lightning path (``strategies.launchers.subprocess_script``).
_SubprocessScriptLauncher = SubprocessScriptLauncher
