"""The checkpoint I/O interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from fabric_core.utilities.types import PathLike

__all__ = ["CheckpointIO"]


class CheckpointIO(ABC):
    """Writes and reads one checkpoint file.

    What a checkpoint I/O can do beyond the three methods is declared, never guessed from its signatures:
    a strategy asks only for what the class declares.
    """

    #: What the kernel knows this class by (see ``fabric_core.plugin_api.KIND_ATTRIBUTE``).
    __fabric_core_kind__: ClassVar[str] = "checkpoint_io"

    #: Whether ``load_checkpoint`` takes ``mmap=True`` (map the file; tensors share its pages instead of being
    #: read into memory first). ``Strategy.load_checkpoint`` passes it, for loads that restore a module, only
    #: where this is ``True``; a subclass whose ``load_checkpoint`` accepts ``mmap`` without declaring it here
    #: is simply never asked to map.
    supports_mmap: ClassVar[bool] = False

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathLike, storage_options: Any = None) -> None:
        """Write ``checkpoint`` to ``path`` so that a failure part-way never damages an existing file."""

    @abstractmethod
    def load_checkpoint(
        self, path: PathLike, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Read a checkpoint (a subclass that declares :attr:`supports_mmap` also takes ``mmap: bool = False``).

        Raises:
            FileNotFoundError: ``path`` does not exist.
            CheckpointError: The file is truncated, foreign, or holds objects refused by ``weights_only``.
        """

    @abstractmethod
    def remove_checkpoint(self, path: PathLike) -> None:
        """Delete a checkpoint."""

    def teardown(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
