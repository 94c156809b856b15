"""The logger interface."""

from __future__ import annotations

import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fabric_core._deferred import lightning_reexports
from fabric_core.io._remote import _is_dir

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = ["Logger", "VersionFolders", "next_version", "rank_zero_experiment", "warn_not_reattached"]


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

    # -- resuming (optional) ---------------------------------------------------------------------------------
    def run_identity(self) -> dict[str, Any] | None:
        """What names this logger's run, so that a resumed job can continue it; ``None``: nothing to continue.

        Called on every rank when a run checkpoint is saved (:class:`fabric_core.RunCheckpoints`); the value of
        global rank 0 is stored in the checkpoint, so it must be plain data (str, int, float, bool, lists and
        dicts of those). A logger that creates its run lazily creates it here, and one that buffers flushes
        here: what was logged before the checkpoint is then on disk.
        """
        return None

    def reattach(self, identity: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Continue the run ``identity`` names (a value of :meth:`run_identity`) instead of starting a new one.

        Called on every rank by ``RunCheckpoints.resume``, which must come before the first log: a logger whose
        run already started keeps it and warns (:func:`warn_not_reattached`).
        """


def rank_zero_experiment(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Decorate a logger's ``experiment`` so that ranks other than 0 get a stand-in that does nothing.

    Lightning's decorator of the same name: on rank 0 the wrapped function's result; elsewhere an object whose
    every method call, item access and item assignment is a no-op, so ``logger.experiment.add_image(...)``
    needs no rank check. The rank is read at each call (``rank_zero_only.rank``).
    """

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        from fabric_core.utilities.rank_zero import rank_zero_only

        if rank_zero_only.rank > 0:
            return _DummyExperiment()
        return fn(self)

    return experiment


class VersionFolders:
    """``name``, ``version`` and ``root_dir`` of a logger that writes each version to a folder of its own.

    Put it before :class:`Logger` in the bases. The logger sets Lightning's attributes ``_root_dir``, ``_name``
    and ``_version`` (``None`` until decided) and says which version is next free (``_get_next_version``).
    """

    _root_dir: str
    _name: str
    _version: int | str | None

    @property
    def name(self) -> str:
        """The experiment name."""
        return self._name

    @property
    def version(self) -> int | str:
        """The experiment version: the one given, else the next free ``version_<N>`` (decided once)."""
        if self._version is None:
            self._version = self._get_next_version()
        return self._version

    @property
    def root_dir(self) -> str:
        """The folder given as ``root_dir``, unexpanded: every experiment is a subfolder of it."""
        return self._root_dir

    def _get_next_version(self) -> int:
        raise NotImplementedError


class _DummyExperiment:
    """The experiment of ranks other than 0: every call, item access and assignment does nothing."""

    def nop(self, *args: Any, **kwargs: Any) -> None:
        """Do nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return self.nop

    def __getitem__(self, index: Any) -> _DummyExperiment:
        return self  # ``logger.experiment[0].add_image(...)``

    def __setitem__(self, index: Any, value: Any) -> None:
        pass


def next_version(fs: AbstractFileSystem, folder: str) -> int:
    """One past the highest ``version_<N>`` folder in ``folder`` (0 when there is none, or no ``folder``).

    Lightning's rule, shared by the loggers that number their runs: an entry counts when it is a folder whose
    name starts with ``version_`` and whose part after that underscore, up to the next one, is digits
    (``version_3_old`` counts as 3, ``version_x`` not at all).

    Args:
        fs: The fsspec filesystem ``folder`` is on (``fabric_core.io`` ``get_filesystem(folder)``).
        folder: The folder holding the versions (``root_dir/name``).
    """
    try:
        listing = fs.listdir(folder)
    except OSError:
        return 0
    found = []
    for entry in listing:
        path = str(entry["name"]).rstrip("/")
        number = os.path.basename(path).split("_")
        if number[0] == "version" and len(number) > 1 and number[1].isdigit() and _is_dir(fs, path):
            found.append(int(number[1]))
    return max(found) + 1 if found else 0


def warn_not_reattached(logger: Logger, current: Any, saved: Any) -> None:
    """Warn (rank 0) that ``logger`` already started ``current`` and so did not switch to the saved ``saved``."""
    from fabric_core.utilities.rank_zero import rank_zero_warn

    if current == saved:
        return
    rank_zero_warn(
        f"{type(logger).__name__} already started {current!r} before the run checkpoint was resumed, so it keeps "
        f"logging there instead of continuing {saved!r}. Call `RunCheckpoints.resume(...)` before the first log."
    )


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
