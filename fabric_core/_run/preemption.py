"""Preemption signals as a flag: the step in flight finishes, the run checkpoints, then the process exits.

The handler does nothing but record the signal, so a save (or any other step) is never cut in the middle;
:class:`~fabric_core.run_checkpoints.RunCheckpoints` reads the flag at a step boundary, where every rank
agrees on it. On SLURM, the environment's ``requeue_signal`` (``SIGUSR1``; ask SLURM for it with
``#SBATCH --signal=USR1@90``) with ``auto_requeue=True`` also requeues the job.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any, Final

from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.rank_zero import rank_zero_warn

__all__ = ["PreemptionFlag", "default_signals", "exit_code", "requeue", "requeue_signal", "signal_name"]

_REQUEUE_TIMEOUT_S: Final = 60


def default_signals(environment: Any) -> tuple[int, ...]:
    """``SIGTERM``, and the environment's ``requeue_signal`` where it has one (SLURM: ``SIGUSR1``)."""
    found = [int(signal.SIGTERM)]
    extra = getattr(environment, "requeue_signal", None)
    if extra is not None and int(extra) not in found:
        found.append(int(extra))
    return tuple(found)


def requeue_signal(environment: Any) -> int | None:
    """The signal after which the job is requeued: the environment's, if it asks for requeues."""
    if not getattr(environment, "auto_requeue", False):
        return None
    value = getattr(environment, "requeue_signal", None)
    return None if value is None else int(value)


class PreemptionFlag:
    """Installs a handler for ``signals`` that records the first one received.

    Args:
        signals: The signal numbers to catch; empty installs nothing.

    Raises:
        InvalidConfigError: A value is not a signal this system knows, or one that cannot be caught.
    """

    def __init__(self, signals: Iterable[int]) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        wanted = [_check_signal(value) for value in signals]
        if wanted and threading.current_thread() is not threading.main_thread():
            # Python lets only the main thread install handlers: a run driven from another thread is not
            # preemptible, which is better said than failed.
            rank_zero_warn("Run checkpoints made outside the main thread do not catch preemption signals.")
            return
        for number in wanted:
            self._previous[number] = signal.signal(number, self._record)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    def ignore_while_exiting(self) -> None:
        """Ignore ``SIGTERM`` and the caught signals from now on: every rank has agreed to save and exit.

        The ranks do not end at the same instant: ``srun --kill-on-bad-exit`` stops the others with ``SIGTERM``
        once the first has exited with ``128 + signum``, and ``srun`` then reports 143 for a task killed that
        way instead of the code the run chose, which a wrapper script waiting for that code would miss. Late
        in its shutdown Python puts back the default action of signals it handles, but leaves ignored ones
        ignored. :meth:`restore` puts back what was there before.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for number in {int(signal.SIGTERM), *self._previous}:
            previous = signal.signal(number, signal.SIG_IGN)
            self._previous.setdefault(number, previous)

    def restore(self) -> None:
        """Put back the handlers that were there before."""
        for number, previous in self._previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()


def _check_signal(value: Any) -> int:
    uncatchable = {int(getattr(signal, "SIGKILL", -1)), int(getattr(signal, "SIGSTOP", -1))}
    valid = {int(s) for s in signal.valid_signals()} - uncatchable
    if isinstance(value, bool) or not isinstance(value, int) or int(value) not in valid:
        raise InvalidConfigError(
            f"`signals` holds {value!r}, which is not a signal that can be caught here. Use values of the `signal` "
            "module, e.g. `signals=(signal.SIGTERM, signal.SIGUSR1)`, or `signals=()` to catch none.",
            argument="signals",
            value=value,
        )
    return int(value)


def requeue(job_id: int | None) -> bool:
    """Run ``scontrol requeue JOB_ID``; report (on stderr) and return ``False`` where it fails."""
    if job_id is None:
        print("fabric-core: cannot requeue: SLURM_JOB_ID is not set.", file=sys.stderr, flush=True)
        return False
    command = ["scontrol", "requeue", str(job_id)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_REQUEUE_TIMEOUT_S, check=False)
    except FileNotFoundError:  # a container without SLURM's client tools
        print(
            f"fabric-core: cannot requeue job {job_id}: `scontrol` is not on the PATH (a container without SLURM's "
            "client tools?). The checkpoint is saved; the job exits with 128 + the signal's number, so that a "
            "wrapper script (or `sbatch` from outside) can requeue it.",
            file=sys.stderr,
            flush=True,
        )
        return False
    except (OSError, subprocess.TimeoutExpired) as err:
        print(f"fabric-core: `{' '.join(command)}` failed: {err}", file=sys.stderr, flush=True)
        return False
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip()
        print(f"fabric-core: `{' '.join(command)}` exited with {done.returncode}: {why}", file=sys.stderr, flush=True)
        return False
    return True


def exit_code(signum: int, requeued: bool) -> int:
    """0 after a requeue (the job goes on in its next allocation), else ``128 + signum`` (143 for SIGTERM)."""
    return 0 if requeued else 128 + signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
