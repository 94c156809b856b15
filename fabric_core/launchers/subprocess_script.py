"""Start the other local processes by running this process's command again (``strategy="ddp"``)."""

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

from fabric_core.errors import InvalidConfigError
from fabric_core.launchers._threads import set_num_threads_if_needed
from fabric_core.launchers.launcher import Launcher

if TYPE_CHECKING:
    from fabric_core.environments.environment import ClusterEnvironment

__all__ = ["SubprocessScriptLauncher", "script_command"]

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
    Nothing is started when the cluster environment creates the processes (torchrun, SLURM, ...).

    A daemon thread watches the children: when one exits non-zero, the others are stopped and this
    process exits with that code within a fraction of a second (the child's traceback is on the shared
    stderr). When this process ends, it waits for the children, and stops them if it is ending on an
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
        self.children: list[subprocess.Popen[bytes]] = []
        self._failed = False
        self._aborting = threading.Lock()
        self._original_excepthook: Callable[..., Any] | None = None

    @property
    def is_interactive_compatible(self) -> bool:
        return False

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Start the children (unless the environment already did), then run ``function`` here."""
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not self.cluster_environment.creates_processes_externally:
            self._start_children()
        return function(*args, **kwargs)

    def _start_children(self) -> None:
        environment = self.cluster_environment
        os.environ["MASTER_ADDR"] = environment.main_address
        os.environ["MASTER_PORT"] = str(environment.main_port)
        os.environ["NODE_RANK"] = str(environment.node_rank())
        os.environ["LOCAL_RANK"] = str(environment.local_rank())
        os.environ["WORLD_SIZE"] = str(self.num_processes * self.num_nodes)
        set_num_threads_if_needed(self.num_processes)
        command = script_command()
        for local_rank in range(1, self.num_processes):
            env = {**os.environ, "LOCAL_RANK": str(local_rank)}
            preexec = functools.partial(_die_with_parent, os.getpid()) if sys.platform == "linux" else None
            self.children.append(subprocess.Popen(command, env=env, preexec_fn=preexec))
        if not self.children:
            return
        threading.Thread(target=self._watch, name="fabric-core-child-observer", daemon=True).start()
        self._original_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self._finish)

    # -- failure handling --------------------------------------------------------------------------------
    def _failed_child(self) -> tuple[int, subprocess.Popen[bytes]] | None:
        for local_rank, child in enumerate(self.children, start=1):
            code = child.poll()
            if code is not None and code != 0:
                return local_rank, child
        return None

    def _watch(self) -> None:
        while any(child.poll() is None for child in self.children):
            failed = self._failed_child()
            if failed is not None:
                self._abort(*failed)
            time.sleep(_POLL_SECONDS)
        failed = self._failed_child()
        if failed is not None:
            self._abort(*failed)

    def _abort(self, local_rank: int, child: subprocess.Popen[bytes]) -> None:
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
        running = [c for c in self.children if c.poll() is None]
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
        self._failed = True
        hook = self._original_excepthook or sys.__excepthook__
        hook(kind, value, traceback)

    def _finish(self) -> None:
        """At exit: stop the children after a failure here, otherwise wait for them (and their codes)."""
        if self._failed:
            self._stop_children()
            return
        while any(child.poll() is None for child in self.children):
            time.sleep(_POLL_SECONDS)
        failed = self._failed_child()
        if failed is not None:
            self._abort(*failed)


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
