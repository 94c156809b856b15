"""Running a multi-process test job as its own process session."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

__all__ = ["run_in_own_session"]


def run_in_own_session(
    command: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a new session with its output and errors together, and wait at most ``timeout``.

    A job that launches ranks can leave them behind when it is killed alone; a timed-out job is killed with
    its whole session (the job and every process it started).

    Args:
        command: The program and its arguments.
        timeout: Seconds to wait.
        env: The environment (``None``: this process's).

    Returns:
        The finished job: ``returncode`` and ``stdout`` (output and errors).

    Raises:
        subprocess.TimeoutExpired: The job ran past ``timeout``; its ``output`` holds what it printed.
    """
    job = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=None if env is None else dict(env),
    )
    try:
        output, _ = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        output, _ = job.communicate()
        raise subprocess.TimeoutExpired(job.args, timeout, output=output) from None
    return subprocess.CompletedProcess(job.args, job.returncode, stdout=output)
