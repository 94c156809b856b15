"""A progress bar on rank 0: steps, epoch, rate, ETA and the latest logged metrics (built on ``rich``)."""

from __future__ import annotations

import atexit
import importlib.util
import math
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from fabric_core.errors import InvalidConfigError

__all__ = ["ProgressBar"]

#: Refreshes per second on a terminal, and on a file or pipe (one line each: a log, not an animation).
_TERMINAL_RATE = 4.0
_FILE_RATE = 0.2
#: Characters of the bar on a terminal.
_BAR_WIDTH = 20


class ProgressBar:
    """Show training progress on global rank 0.

    Select it by name: ``Fabric(callbacks=["progress"])`` or ``spec("progress", total_steps=1000)``. It counts
    optimizer steps through the ``on_after_optimizer_step`` event of fabric-core's optimizer wrapper, shows
    what ``fabric.log`` / ``fabric.log_dict`` sent last (the ``on_log`` event), and the epoch that the loop
    announces with ``fabric.call("on_train_epoch_start", epoch=epoch)``. ``fabric.call("on_train_start",
    total_steps=..., total_epochs=...)`` sets the totals once the loop knows them, and
    ``fabric.call("on_train_end")`` draws the final state and releases the terminal.

    On a terminal it is a live ``rich`` progress bar. When the output is not a terminal (a pipe, a CI log, a
    file) it is silent unless ``force=True``; forced, it prints one plain line per refresh. Other ranks
    print nothing, so a multi-process job shows one bar.

    A step costs a counter increment and a clock read: the drawing happens at most ``refresh_per_second``
    times a second, in the training thread (no background thread competes with the step).

    Args:
        total_steps: Steps the run will take, for the bar, ``step/total`` and the ETA (``None``: unknown).
        total_epochs: Epochs the run will take, shown as ``epoch e/total``.
        force: Print even when the output is not a terminal.
        refresh_per_second: The most redraws per second (default 4 on a terminal, 0.2 on a file).
        stream: Where to write (default ``sys.stdout``, looked up when the bar starts).
        metrics_format: Format spec of metric values (``".4g"``).

    Raises:
        InvalidConfigError: An option has a wrong type or value (also a ``ValueError``).
        ModuleNotFoundError: ``rich`` is not installed (``pip install 'fabric-core[progress]'``).
    """

    def __init__(
        self,
        total_steps: int | None = None,
        total_epochs: int | None = None,
        force: bool = False,
        refresh_per_second: float | None = None,
        stream: IO[str] | None = None,
        metrics_format: str = ".4g",
    ) -> None:
        if importlib.util.find_spec("rich") is None:
            # Here, when the Fabric is built, rather than at the first drawn line after setup.
            raise ModuleNotFoundError(
                "The progress bar (`callbacks=['progress']`) is drawn with `rich`, which is not installed. "
                "Run `pip install 'fabric-core[progress]'` (or `pip install rich`).",
                name="rich",
            )
        _check_totals("ProgressBar", total_steps, total_epochs)
        if refresh_per_second is not None and (
            isinstance(refresh_per_second, bool)
            or not isinstance(refresh_per_second, (int, float))
            or not refresh_per_second > 0
            or math.isinf(refresh_per_second)
        ):
            raise InvalidConfigError(
                f"`ProgressBar(refresh_per_second={refresh_per_second!r})`: expected a finite number > 0.",
                argument="refresh_per_second",
                value=refresh_per_second,
            )
        try:
            format(1.5, metrics_format)
        except (TypeError, ValueError):
            raise InvalidConfigError(
                f"`ProgressBar(metrics_format={metrics_format!r})`: not a format spec for numbers (try '.4g').",
                argument="metrics_format",
                value=metrics_format,
            ) from None
        self.total_steps = total_steps
        self.total_epochs = total_epochs
        self.force = force
        self.refresh_per_second = refresh_per_second
        self.metrics_format = metrics_format
        self.steps = 0
        self.epoch: int | None = None
        self.metrics: dict[str, Any] = {}
        self._stream = stream
        # None: not decided yet (the rank is known at setup); False: this process shows nothing.
        self._active: bool | None = None
        self._terminal = False
        self._interval = 0.0
        self._next_refresh = 0.0
        self._start = 0.0
        self._last: tuple[float, int] = (0.0, 0)
        self._rate = 0.0
        self._console: Any = None
        self._live: Any = None

    # -- events ------------------------------------------------------------------------------------------
    def on_after_setup(self, fabric: Any) -> None:
        if self._active is None:
            self._start_display(int(getattr(fabric, "global_rank", 0)))

    def on_train_start(self, total_steps: int | None = None, total_epochs: int | None = None) -> None:
        """Set the totals once the loop knows them: ``fabric.call("on_train_start", total_steps=...)``.

        Raises:
            InvalidConfigError: A total is not an integer >= 1 (also a ``ValueError``).
        """
        _check_totals("on_train_start", total_steps, total_epochs)
        self.total_steps = total_steps or self.total_steps
        self.total_epochs = total_epochs or self.total_epochs

    def on_train_epoch_start(self, epoch: int) -> None:
        self.epoch = epoch
        self._maybe_refresh()

    def on_log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        self.metrics.update(metrics)

    def on_after_optimizer_step(self) -> None:
        # The hot path: one increment and one clock read.
        self.steps += 1
        now = time.perf_counter()
        if now >= self._next_refresh:
            self._refresh(now)

    def on_train_end(self) -> None:
        self.close()

    # -- drawing -----------------------------------------------------------------------------------------
    def render(self) -> str:
        """The current state as one plain line (what a forced bar prints to a file)."""
        parts = [self._epoch_text()] if self.epoch is not None else []
        parts.append(f"step {self.steps}" + (f"/{self.total_steps}" if self.total_steps else ""))
        parts.append(f"{self._rate:.2f} it/s")
        parts.append(f"{_clock(self._elapsed())}<{self._eta()}")
        if self.metrics:
            parts.append(self._metrics_text())
        return " | ".join(parts)

    def close(self) -> None:
        """Draw the final state and release the terminal; further steps still count but draw nothing."""
        if not self._active:
            return
        self._refresh(time.perf_counter())
        self._active = False
        if self._live is not None:
            self._live.stop()
            self._live = None
        atexit.unregister(self.close)

    def _start_display(self, rank: int) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        isatty = getattr(stream, "isatty", None)
        self._terminal = bool(isatty()) if callable(isatty) else False
        self._active = rank == 0 and (self._terminal or self.force)
        if not self._active:
            self._next_refresh = math.inf  # steps never reach the drawing code
            return
        rate = self.refresh_per_second or (_TERMINAL_RATE if self._terminal else _FILE_RATE)
        self._interval = 1.0 / rate
        self._start = time.perf_counter()
        self._last = (self._start, self.steps)
        self._next_refresh = self._start + self._interval
        from rich.console import Console

        self._console = Console(file=stream, force_terminal=self._terminal, highlight=False)
        if self._terminal:
            self._start_live()
        atexit.register(self.close)

    def _start_live(self) -> None:
        from rich.live import Live

        # Prints to stdout go above the bar when the bar is on stdout; a bar on another stream leaves them alone.
        self._live = Live(
            self._live_line(),
            console=self._console,
            auto_refresh=False,  # refreshed by hand from the training thread: no thread takes the GIL from a step
            redirect_stdout=self._console.file is sys.stdout,
            redirect_stderr=False,
        )
        self._live.start()

    def _live_line(self) -> Any:
        """The terminal's line: one ``Text`` (a ``rich.progress`` table costs several times more to draw)."""
        from rich.text import Text

        line = Text()  # wraps on a narrow terminal: the metrics stay visible
        if self.epoch is not None:
            line.append(self._epoch_text() + " ", style="bold")
        if self.total_steps:
            done = min(_BAR_WIDTH, _BAR_WIDTH * self.steps // self.total_steps)
            line.append("━" * done, style="magenta").append("━" * (_BAR_WIDTH - done), style="grey23")
            line.append(" ")
        line.append(f"{self.steps}/{self.total_steps or '?'} {self._rate:.2f} it/s ")
        line.append(f"{_clock(self._elapsed())}<{self._eta()}", style="cyan")
        if self.metrics:
            line.append(" " + self._metrics_text())
        return line

    def _maybe_refresh(self) -> None:
        if self._active is None:  # events before setup: decide from the launcher's rank
            from fabric_core.utilities.rank_zero import rank_zero_only

            self._start_display(rank_zero_only.rank)
        now = time.perf_counter()
        if now >= self._next_refresh:
            self._refresh(now)

    def _refresh(self, now: float) -> None:
        if self._active is None:
            self._maybe_refresh()
            return
        if not self._active:
            self._next_refresh = math.inf
            return
        self._next_refresh = now + self._interval
        last_time, last_steps = self._last
        if now > last_time and self.steps > last_steps:
            self._rate = (self.steps - last_steps) / (now - last_time)
        self._last = (now, self.steps)
        if self._live is None:
            self._console.print(self.render(), markup=False, soft_wrap=True)
        else:
            self._live.update(self._live_line(), refresh=True)

    def _epoch_text(self) -> str:
        if self.epoch is None:
            return ""
        return f"epoch {self.epoch}" + (f"/{self.total_epochs}" if self.total_epochs else "")

    def _elapsed(self) -> float:
        return max(0.0, time.perf_counter() - self._start) if self._start else 0.0

    def _eta(self) -> str:
        if not self.total_steps or self._rate <= 0:
            return "?"
        return _clock(max(0, self.total_steps - self.steps) / self._rate)

    def _metrics_text(self) -> str:
        return " ".join(f"{k}={_number(v, self.metrics_format)}" for k, v in self.metrics.items())


def _check_totals(where: str, total_steps: Any, total_epochs: Any) -> None:
    for arg, value in (("total_steps", total_steps), ("total_epochs", total_epochs)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidConfigError(
                f"`{where}({arg}={value!r})`: expected an integer >= 1 or None.", argument=arg, value=value
            )


def _number(value: Any, spec: str) -> str:
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
