"""A logger that keeps what it is given, for tests of anything that logs."""

from __future__ import annotations

from typing import Any

from fabric_core.loggers.logger import Logger

__all__ = ["RecordingLogger"]


class RecordingLogger(Logger):
    """Records every ``log_metrics`` call as ``(step, metrics)`` in :attr:`rows`; hyperparameters are dropped."""

    def __init__(self) -> None:
        self.rows: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recorder"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: Any, step: int | None = None) -> None:
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass
