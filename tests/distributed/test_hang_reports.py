"""Ranks that part ways are told apart in one picture, on every rank, within seconds: real ddp jobs on gloo.

tests/_jobs/diverging_job.py makes the commonest mistakes (a save on rank 0 only, different collectives on
different ranks, barriers of different names, a rank that never arrives). A mismatch that the ranks can see
at once (barrier names; any call with ``FABRIC_CORE_CHECK_COLLECTIVES=1``) raises the same
``CollectiveMismatchError`` on every rank; a wait prints, after ``FABRIC_CORE_HANG_WARN_SECONDS``, one table
of every rank with the call at which they parted; with ``FABRIC_CORE_HANG_ABORT_SECONDS`` the job then
stops on every rank with that table as its error. Each job runs in its own session with a deadline.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

JOB = Path(__file__).parents[1] / "_jobs" / "diverging_job.py"
SOURCE = JOB.read_text().splitlines()

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(150)]


def line_of(marker: str) -> str:
    """``diverging_job.py:N``, the line of the job marked ``# marker``."""
    return f"{JOB}:{next(i for i, text in enumerate(SOURCE, 1) if text.endswith(f'# {marker}'))}"


class Run:
    """A job's lines with the time each arrived, its exit code and how long it ran."""

    def __init__(self, modes: str, ranks: int, directory: Path, deadline: float, **env: str) -> None:
        self.lines: list[tuple[float, str]] = []
        start = time.monotonic()
        job = subprocess.Popen(
            [sys.executable, str(JOB), modes, str(ranks), str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=directory,
            env={**os.environ, "FABRIC_CORE_EXIT_TIMEOUT": "8", **env},
        )
        assert job.stdout is not None
        os.set_blocking(job.stdout.fileno(), False)
        selector = selectors.DefaultSelector()
        selector.register(job.stdout, selectors.EVENT_READ)
        pending = b""
        try:
            while job.poll() is None and time.monotonic() - start < deadline:
                if selector.select(timeout=0.1):
                    chunk = job.stdout.read() or b""
                    pending += chunk
                    *complete, pending = pending.split(b"\n")
                    now = time.monotonic() - start
                    self.lines += [(now, line.decode(errors="replace")) for line in complete]
            self.returncode = job.poll()
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)  # the job and every rank it started
                job.wait()
        rest = (pending + (job.stdout.read() or b"")).decode(errors="replace")
        self.lines += [(time.monotonic() - start, line) for line in rest.splitlines()]
        self.seconds = time.monotonic() - start
        self.text = "\n".join(line for _, line in self.lines)

    def first(self, pattern: str) -> float:
        """When the first line matching ``pattern`` arrived (seconds since the start)."""
        return next(t for t, line in self.lines if re.search(pattern, line))

    def blocks(self, title: str) -> list[str]:
        """Every report printed: the block of lines from each ``title`` line to its ``cause:`` line."""
        found, current = [], None
        for _, line in self.lines:
            if title in line:
                current = [line]
            elif current is not None:
                current.append(line)
                if line.lstrip().startswith("cause:"):
                    found.append("\n".join(current))
                    current = None
        return found


def test_barriers_of_different_names_and_a_save_on_rank_0_only_fail_at_once_on_every_rank(tmp_path: Path) -> None:
    # One job, both mistakes in turn: each raises on every rank, together, and the job goes on.
    run = Run("named-barriers,save-then-barrier", 2, tmp_path, deadline=90)
    assert run.returncode == 0, run.text[-4000:]
    named = f"rank 0: barrier 'eval' ({line_of('NAMED_LINE')}); rank 1: barrier 'epoch' ({line_of('NAMED_LINE')})"
    save = (
        f"rank 0: the barrier that ends `fabric.save` ({line_of('SAVE_LINE')}); "
        f"rank 1: an unnamed barrier ({line_of('BARRIER_LINE')})"
    )
    for rank in (0, 1):
        raised = [line for _, line in run.lines if line.startswith(f"rank {rank} raised: ")]
        assert len(raised) == 2, run.text[-4000:]
        assert f"The ranks reached different barriers: {named}." in raised[0]
        assert f"The ranks reached different barriers: {save}." in raised[1]
        assert f"rank {rank} done" in run.text


def test_the_collective_check_names_both_calls_before_the_mismatched_collective_runs(tmp_path: Path) -> None:
    run = Run("reduce-vs-gather,save-then-barrier", 2, tmp_path, deadline=90, FABRIC_CORE_CHECK_COLLECTIVES="1")
    assert run.returncode == 0, run.text[-4000:]
    mismatch = (
        f"rank 0: #2 `fabric.all_reduce` float32[1] ({line_of('REDUCE_LINE')}); "
        f"rank 1: #2 `fabric.all_gather` float32[1] ({line_of('GATHER_LINE')})"
    )
    save = f"rank 0: #3 `fabric.save` ({line_of('SAVE_LINE')}); rank 1: #3 `fabric.barrier` ({line_of('BARRIER_LINE')})"
    for rank in (0, 1):
        raised = [line for _, line in run.lines if line.startswith(f"rank {rank} raised: ")]
        assert len(raised) == 2, run.text[-4000:]
        assert "(FABRIC_CORE_CHECK_COLLECTIVES=1)" in raised[0] and mismatch in raised[0], raised[0]
        assert save in raised[1], raised[1]


def test_a_save_on_rank_0_only_is_named_on_every_rank_within_the_threshold(tmp_path: Path) -> None:
    # Rank 0 waits in the barrier that ends its save; rank 1 has returned and waits in the exit handler.
    run = Run("save-then-return", 2, tmp_path, deadline=90, FABRIC_CORE_HANG_WARN_SECONDS="2")
    reports = run.blocks("] where every rank is:")
    assert len(reports) == 2, run.text[-5000:]  # both ranks wait, both print the table
    for report in reports:
        assert re.search(rf"rank 0: waiting \d+ s in `save` .*, called from {line_of('LONE_SAVE_LINE')}", report), (
            report
        )
        assert "rank 1: waiting" in report and "in fabric-core's exit handler" in report, report
        assert re.search(rf"#2 save {line_of('LONE_SAVE_LINE')}", report), report
        cause = report.splitlines()[-1]
        assert (
            f"rank 0 reached call #2, `fabric.save` ({line_of('LONE_SAVE_LINE')}), which rank 1 has not made" in cause
        )
        assert "`fabric.save` must be called on every rank" in cause
    # From the moment both ranks are past setup: the threshold, one sampling interval, the exchange.
    assert run.first(r"cause:") - run.first(r"rank [01] set up") < 2 + 5, run.text[-3000:]


def test_different_collectives_on_three_ranks_are_reported_then_stop_the_job_on_every_rank(tmp_path: Path) -> None:
    run = Run(
        "reduce-vs-gather",
        3,
        tmp_path,
        deadline=90,
        FABRIC_CORE_HANG_WARN_SECONDS="2",
        FABRIC_CORE_HANG_ABORT_SECONDS="4",
    )
    assert run.returncode == 3, run.text[-5000:]  # the watchdog's exit code, not a hang killed by the deadline
    reports = run.blocks("] where every rank is:")
    assert reports, run.text[-5000:]
    cause = reports[0].splitlines()[-1]
    assert (
        f"The ranks differ from call #2 on: rank 0 called `fabric.all_reduce` (float32[1]) ({line_of('REDUCE_LINE')}); "
        f"ranks 1, 2 called `fabric.all_gather` (float32[1]) ({line_of('GATHER_LINE')})" in cause
    ), cause
    for rank in range(3):
        assert re.search(rf"^\[fabric-core rank {rank}\] stopping: a collective waited \d+ s", run.text, re.M), rank
    # Every process is gone within the abort threshold and 10 s of the ranks being set up.
    assert run.seconds - run.first(r"rank [012] set up") < 4 + 10, run.text[-3000:]


def test_a_rank_outside_any_collective_is_named_with_its_line_at_four_ranks(tmp_path: Path) -> None:
    run = Run("stuck-outside", 4, tmp_path, deadline=120, FABRIC_CORE_HANG_ABORT_SECONDS="3")
    assert run.returncode == 3, run.text[-5000:]
    report = run.blocks("] where every rank is:")[0]
    assert f"rank 3: not in a collective: running {line_of('SLEEP_LINE')} (in `run`)" in report, report
    cause = report.splitlines()[-1]
    assert (
        f"ranks 0, 1, 2 reached call #2, `fabric.barrier` ({line_of('WAITING_LINE')}), which rank 3 has not made"
        in (cause)
    ), cause
    assert run.seconds - run.first(r"rank [0-3] set up") < 3 + 10, run.text[-3000:]
