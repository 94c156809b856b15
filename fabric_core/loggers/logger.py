"""The logger interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

__all__ = ["Logger"]


class Logger(ABC):
    """Receives scalar metrics from ``fabric.log`` / ``fabric.log_dict`` on every rank.

    Implementations write on global rank 0 only (see :func:`fabric_core.utilities.rank_zero_only`).
    """

    @property
    @abstractmethod
    def name(self) -> str | None:
        """The experiment name."""

    @property
    @abstractmethod
    def version(self) -> int | str | None:
        """The experiment version."""

    @property
    def root_dir(self) -> str | None:
        """Folder holding every version of the experiment."""
        return None

    @property
    def log_dir(self) -> str | None:
        """Folder this version writes to."""
        return None

    @property
    def group_separator(self) -> str:
        """Separates group and metric names (``"train/loss"``)."""
        return "/"

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Record scalar metrics at ``step``."""

    @abstractmethod
    def log_hyperparams(self, params: Mapping[str, Any] | Any, *args: Any, **kwargs: Any) -> None:
        """Record hyperparameters."""

    def log_graph(self, model: Any, input_array: Any = None) -> None:  # noqa: B027 - optional hook
        """Record the model graph."""

    def save(self) -> None:  # noqa: B027 - optional hook
        """Flush what is buffered."""

    def finalize(self, status: str) -> None:
        """Flush and close at the end of the run (``status`` is e.g. ``"success"``)."""
        self.save()
