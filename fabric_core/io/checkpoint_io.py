"""The checkpoint I/O interface."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

__all__ = ["CheckpointIO"]

PathLike = str | os.PathLike[str]


class CheckpointIO(ABC):
    """Writes and reads one checkpoint file."""

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None) -> None:
        """Write ``checkpoint`` to ``path`` so that a failure part-way never damages an existing file."""

    @abstractmethod
    def load_checkpoint(
        self, path: PathLike, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Read a checkpoint.

        Raises:
            FileNotFoundError: ``path`` does not exist.
            CheckpointError: The file is truncated, foreign, or holds objects refused by ``weights_only``.
        """

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete a checkpoint."""

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
