"""A profiler over ``torch.profiler``: a callback stepped by the optimizer, or ``fabric.profile()`` around a block.

Each process writes its own trace (TensorBoard / Chrome trace format, ``rank<N>.<time>.pt.trace.json``) into
the first logger's folder (``<log_dir>/profiler``), or into ``dirpath``; global rank 0 prints a summary table
when profiling ends.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import Any

from fabric_core.errors import InvalidConfigError

__all__ = ["Profiler", "profile"]

_ACTIVITIES = ("cpu", "cuda", "xpu")


class Profiler:
    """Profile training steps with ``torch.profiler`` and a wait/warmup/active schedule.

    As a callback, ``Fabric(callbacks=[spec("profiler", active=3)])``: it starts when ``fabric.setup`` sets up
    the model and steps with each optimizer step (the ``on_after_optimizer_step`` event); it stops after the
    schedule's last active step (``repeat`` cycles), at ``fabric.call("on_train_end")``, or at exit. Around a
    block, ``with fabric.profile(active=3) as profiler:`` and ``profiler.step()`` after each step.

    Args:
        wait: Steps skipped at the start of each cycle.
        warmup: Steps profiled and thrown away (the profiler's own start-up cost) before the active ones.
        active: Steps recorded per cycle.
        repeat: Cycles; each writes one trace per process. ``0``: until profiling stops.
        skip_first: Steps skipped once, before the first cycle.
        dirpath: Where the traces go. Default: ``<log_dir>/profiler`` of the first logger that has a
            ``log_dir``, else ``./profiler``.
        activities: Any of ``"cpu"``, ``"cuda"``, ``"xpu"``; default: the CPU, and the process's device.
        sort_by: The column of the summary table to sort by (``key_averages().table(sort_by=...)``).
        row_limit: Rows of the summary table; ``0`` prints none.
        **profiler_kwargs: Passed on to ``torch.profiler.profile`` (``record_shapes``, ``profile_memory``,
            ``with_stack``, ...).

    Raises:
        InvalidConfigError: An option has a wrong type or value (also a ``ValueError``).
    """

    def __init__(
        self,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        skip_first: int = 0,
        dirpath: str | os.PathLike[str] | None = None,
        activities: Sequence[str] | None = None,
        sort_by: str | None = None,
        row_limit: int = 20,
        **profiler_kwargs: Any,
    ) -> None:
        for name, value, low in (
            ("wait", wait, 0),
            ("warmup", warmup, 0),
            ("active", active, 1),
            ("repeat", repeat, 0),
            ("skip_first", skip_first, 0),
            ("row_limit", row_limit, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidConfigError(
                    f"`Profiler({name}={value!r})`: expected an integer >= {low}.", argument=name, value=value
                )
        if activities is not None:
            unknown = [a for a in activities if a not in _ACTIVITIES]
            if unknown or isinstance(activities, str):
                raise InvalidConfigError(
                    f"`Profiler(activities={activities!r})`: expected a list of {', '.join(map(repr, _ACTIVITIES))}.",
                    argument="activities",
                    value=activities,
                )
        for reserved in ("schedule", "on_trace_ready"):
            if reserved in profiler_kwargs:
                raise InvalidConfigError(
                    f"`Profiler({reserved}=...)`: the profiler sets it itself; use wait/warmup/active/repeat and "
                    "dirpath instead.",
                    argument=reserved,
                    value=profiler_kwargs[reserved],
                )
        self.wait, self.warmup, self.active, self.repeat, self.skip_first = wait, warmup, active, repeat, skip_first
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.activities = None if activities is None else list(activities)
        self.sort_by = sort_by
        self.row_limit = row_limit
        self.profiler_kwargs = profiler_kwargs
        self.steps = 0
        self.summary: str | None = None
        self._profiler: Any = None
        self._started = False
        self._rank = 0
        self._last_step = (
            skip_first + (wait + warmup + active) * repeat if repeat else None
        )  # the step after which the schedule records nothing more

    # -- events ------------------------------------------------------------------------------------------
    def on_after_setup(self, fabric: Any) -> None:
        if not self._started:  # a second `fabric.setup` (another model) does not start a second profile
            self.start(fabric)

    def on_after_optimizer_step(self) -> None:
        if self._profiler is not None:
            self.step()

    def on_train_end(self) -> None:
        self.stop()

    # -- control -----------------------------------------------------------------------------------------
    def start(self, fabric: Any = None) -> None:
        """Start profiling; traces are named after ``fabric``'s global rank and go to its first logger's folder."""
        import torch.profiler

        if self._profiler is not None:
            return
        self._started = True
        self._rank = int(getattr(fabric, "global_rank", 0))
        if self.dirpath is None:
            self.dirpath = _log_dir(fabric)
            if int(getattr(fabric, "world_size", 1)) > 1:  # a logger's next free version is rank 0's to decide
                self.dirpath = fabric.broadcast(self.dirpath, src=0)
        device_type = getattr(getattr(fabric, "device", None), "type", "cpu")
        names = self.activities or ["cpu"] + ([device_type] if device_type in _ACTIVITIES[1:] else [])
        activities = [getattr(torch.profiler.ProfilerActivity, name.upper()) for name in dict.fromkeys(names)]
        schedule = torch.profiler.schedule(
            wait=self.wait, warmup=self.warmup, active=self.active, repeat=self.repeat, skip_first=self.skip_first
        )
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(self.dirpath, worker_name=f"rank{self._rank}"),
            **self.profiler_kwargs,
        )
        self._profiler.start()
        atexit.register(self.stop)

    def step(self) -> None:
        """Mark the end of a training step: advances the schedule (writes a trace after each cycle's last step)."""
        if self._profiler is None:
            return
        self._profiler.step()
        self.steps += 1
        if self._last_step is not None and self.steps >= self._last_step:
            self.stop()

    def stop(self) -> None:
        """Stop profiling and, on global rank 0, print the summary table of the last recorded steps."""
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        atexit.unregister(self.stop)
        profiler.stop()
        if self.row_limit == 0:
            return
        try:
            averages = profiler.key_averages()
        except (AssertionError, RuntimeError):  # nothing was recorded (stopped before an active step)
            return
        self.summary = averages.table(sort_by=self.sort_by or _default_sort(averages), row_limit=self.row_limit)
        if self._rank == 0:
            print(self.summary, flush=True)


@contextmanager
def profile(fabric: Any, **options: Any) -> Generator[Profiler, None, None]:
    """``fabric.profile(...)``: a :class:`Profiler` started on entry and stopped on exit.

    Raises:
        InvalidConfigError: An option has a wrong type or value (also a ``ValueError``).
    """
    profiler = Profiler(**options)
    profiler.start(fabric)
    try:
        yield profiler
    finally:
        profiler.stop()


def _log_dir(fabric: Any) -> str:
    for logger in getattr(fabric, "loggers", None) or ():
        log_dir = getattr(logger, "log_dir", None)
        if log_dir:
            return os.path.join(os.fspath(log_dir), "profiler")
    return os.path.abspath("profiler")


def _default_sort(averages: Any) -> str:
    # The device's own time when one was profiled, else the CPU's.
    has_device = any(getattr(event, "device_time_total", 0) for event in averages)
    return "self_device_time_total" if has_device else "self_cpu_time_total"
