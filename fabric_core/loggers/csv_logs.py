"""A logger that writes metrics to a CSV file and needs nothing beyond the standard library."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import InvalidConfigError
from fabric_core.io.atomic import atomic_write
from fabric_core.loggers.logger import Logger, warn_not_reattached
from fabric_core.utilities.rank_zero import rank_zero_only, rank_zero_warn

__all__ = ["CSVLogger"]

METRICS_FILE: Final = "metrics.csv"
STEP_KEY: Final = "step"
PREFIX_SEPARATOR: Final = "-"


def _scalar(value: Any) -> Any:
    if type(value) is float or type(value) is int:  # what `fabric.log` passes on: nothing to look up
        return value
    # Tensors and numpy scalars both expose `.item()`; duck typing keeps torch out of this module.
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def _next_version(versions_root: Path) -> int:
    if not versions_root.is_dir():
        return 0
    found = [
        int(entry.name[len("version_") :])
        for entry in versions_root.iterdir()
        if entry.is_dir() and entry.name.startswith("version_") and entry.name[len("version_") :].isdigit()
    ]
    return max(found) + 1 if found else 0


class CSVLogger(Logger):
    """Write metrics to ``<root_dir>/<name>/version_<N>/metrics.csv``, one row per ``log_metrics`` call.

    Rows are buffered and appended every ``flush_logs_every_n_steps`` steps, on :meth:`save` and in
    :meth:`finalize`. The header is the sorted union of every metric name seen and ``step``; when a new name
    appears the file is rewritten (atomically) with the wider header. Only global rank 0 writes.

    A job resumed from a run checkpoint (:class:`fabric_core.RunCheckpoints`) continues the same version: the
    rows logged up to the checkpoint are kept, those logged after it (the interrupted part, which the resumed
    job logs again) are dropped, and new rows are appended under the same header.

    Args:
        root_dir: Folder holding every experiment.
        name: Experiment name, a subfolder of ``root_dir`` (empty for none).
        version: ``None`` takes the next free ``version_<N>``; an int selects ``version_<int>``; a string is
            used as the folder name as it is.
        prefix: Prepended to every metric name, joined with ``"-"``.
        flush_logs_every_n_steps: How many steps to buffer between writes.

    Raises:
        InvalidConfigError: ``flush_logs_every_n_steps`` is not a positive integer.
    """

    #: Joins ``prefix`` and a metric name (Lightning's name; a subclass may change it).
    LOGGER_JOIN_CHAR: ClassVar[str] = PREFIX_SEPARATOR

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if (
            isinstance(flush_logs_every_n_steps, bool)
            or not isinstance(flush_logs_every_n_steps, int)
            or flush_logs_every_n_steps < 1
        ):
            raise InvalidConfigError(
                f"`CSVLogger(flush_logs_every_n_steps={flush_logs_every_n_steps!r})` is not valid: "
                "expected an integer >= 1.",
                argument="flush_logs_every_n_steps",
                value=flush_logs_every_n_steps,
            )
        self._root_dir = os.fspath(root_dir)
        self._name = name or ""
        self._version = version
        self._prefix = prefix
        self._flush_every = flush_logs_every_n_steps
        self._rows: list[dict[str, Any]] = []  # logged, not yet written
        self._columns: list[str] = []  # the header of the file on disk
        self._rows_logged = 0
        self._started = False
        self._keep_rows: int | None = None  # resuming: how many rows of the existing file to keep

    @property
    def name(self) -> str:
        """The experiment name."""
        return self._name

    @property
    def version(self) -> int | str:
        """The experiment version: the one given, else the next free ``version_<N>`` (decided once)."""
        if self._version is None:
            self._version = _next_version(Path(self._root_dir, self._name))
        return self._version

    @property
    def root_dir(self) -> str:
        """Folder holding every version of the experiment (``root_dir/name``'s parent)."""
        return self._root_dir

    @property
    def log_dir(self) -> str:
        """Folder this version writes to: ``root_dir/name/version_<N>`` (or the version string)."""
        version = self.version
        folder = version if isinstance(version, str) else f"version_{version}"
        return os.path.join(self._root_dir, self._name, folder)

    @property
    def experiment(self) -> CSVLogger:
        """What writes the file: this logger itself (``log_metrics``, ``save``, ``metrics_file_path``).

        Lightning returns a separate writer object with those members; code that calls
        ``logger.experiment.log_metrics(...)`` or ``.save()`` works the same on this one.
        """
        return self

    @property
    def metrics_file_path(self) -> str:
        """The CSV file this logger writes."""
        return os.path.join(self.log_dir, METRICS_FILE)

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Any, *args: Any, **kwargs: Any) -> None:
        """Not supported by this logger.

        Raises:
            NotImplementedError: Always (on rank 0).
        """
        raise NotImplementedError("The `CSVLogger` does not yet support logging hyperparameters.")

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Buffer one row of metrics; write the buffer every ``flush_logs_every_n_steps`` steps.

        Args:
            metrics: Metric names and scalar values (numbers, or one-element tensors / numpy scalars).
            step: The step of this row; ``None`` uses the number of rows waiting to be written, as Lightning's
                logger does (so it restarts at 0 after each write: pass ``step`` for a running count).
        """
        if step is None:
            step = len(self._rows)
        row = {self._prefixed(key): _scalar(value) for key, value in metrics.items()}
        row[STEP_KEY] = step
        self._rows.append(row)
        self._rows_logged += 1
        if (step + 1) % self._flush_every == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        """Write the buffered rows to the CSV file."""
        if not self._rows:
            return
        self._start()
        path = Path(self.metrics_file_path)
        seen = set(self._columns)
        new_columns = {key for row in self._rows for key in row} - seen
        if new_columns or not path.exists():
            self._rewrite(path, sorted(seen | new_columns))
        else:
            columns = self._columns  # every buffered name is one of them (else the branch above)
            with open(path, "a", newline="", encoding="utf-8") as file:
                csv.writer(file).writerows([[row.get(c, "") for c in columns] for row in self._rows])
        self._rows = []

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Write what is still buffered at the end of the run.

        Args:
            status: How the run ended (``"success"``, ``"failed"``, ...); not recorded.
        """
        self.save()

    def run_identity(self) -> dict[str, Any]:
        """The version and the number of rows logged; the buffered rows are written first."""
        self.save()
        return {"version": self.version, "rows": self._rows_logged}

    def reattach(self, identity: Mapping[str, Any]) -> None:
        """Continue the version of ``identity``, keeping its first ``rows`` rows (see :meth:`run_identity`)."""
        version, rows = identity.get("version"), identity.get("rows")
        if not isinstance(version, (int, str)) or not isinstance(rows, int):
            rank_zero_warn(f"CSVLogger: the run checkpoint's identity {dict(identity)!r} is not one; not reattached.")
            return
        if self._started:
            warn_not_reattached(self, self.version, version)
            return
        self._version, self._rows_logged, self._keep_rows = version, rows, rows
        if rank_zero_only.rank == 0 and Path(self.metrics_file_path).exists():
            self._start()  # drop the rows logged after the checkpoint now, even if nothing is logged again

    def _prefixed(self, key: str) -> str:
        return f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}" if self._prefix else key

    def _start(self) -> None:
        # Deferred to the first write so that ranks other than 0, and runs that log nothing, touch no files.
        if self._started:
            return
        if self._keep_rows is not None:
            self._continue()
            return
        log_dir = Path(self.log_dir)
        # The profiler callback's traces (its `profiler` folder) may be written before the first metrics.
        if log_dir.is_dir() and any(entry.name != "profiler" for entry in log_dir.iterdir()):
            rank_zero_warn(
                f"The log folder {os.fspath(log_dir)!r} already exists and is not empty; its {METRICS_FILE} "
                "will be replaced by this run's metrics. Pass a new `version=` (or none) to keep them apart.",
            )
        log_dir.mkdir(parents=True, exist_ok=True)
        Path(log_dir, METRICS_FILE).unlink(missing_ok=True)
        self._started = True

    def _continue(self) -> None:
        """Resume the file of a reattached version: its header, and its first ``_keep_rows`` rows."""
        path = Path(self.metrics_file_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._started = True
        if not path.exists():
            return
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            kept = list(reader)
            columns = list(reader.fieldnames or [])
        assert self._keep_rows is not None
        if len(kept) > self._keep_rows:
            _write(path, columns, kept[: self._keep_rows])
        self._columns = columns

    def _rewrite(self, path: Path, columns: list[str]) -> None:
        old_rows: list[dict[str, str]] = []
        if path.exists():
            with open(path, newline="", encoding="utf-8") as file:
                old_rows = list(csv.DictReader(file))
        _write(path, columns, [*old_rows, *self._rows])
        self._columns = columns


def _write(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    """Replace ``path`` atomically with a header of ``columns`` and ``rows``."""
    with atomic_write(path) as raw:
        file = io.TextIOWrapper(raw, newline="", encoding="utf-8")
        writer = csv.DictWriter(file, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
        # Flush the text layer and let go of the raw file: atomic_write fsyncs, closes and renames it.
        file.flush()
        file.detach()


class _ExperimentWriter:
    """Lightning's metrics writer behind its ``CSVLogger`` (``lightning.pytorch``'s writer subclasses it).

    Rows are kept in ``metrics`` until :meth:`save` appends them to ``<log_dir>/metrics.csv``; a new column
    rewrites the file with the wider header. The folder is created at once; a ``metrics.csv`` already in it is
    deleted, with a warning. Paths are served by fsspec, so remote folders work too.

    Args:
        log_dir: The folder to write to.
    """

    NAME_METRICS_FILE = METRICS_FILE

    def __init__(self, log_dir: str) -> None:
        from fabric_core.io._remote import get_filesystem

        self.metrics: list[dict[str, float]] = []
        self.metrics_keys: list[str] = []
        self._fs = get_filesystem(log_dir)
        self.log_dir = log_dir
        self.metrics_file_path = os.path.join(self.log_dir, self.NAME_METRICS_FILE)
        self._check_log_dir_exists()
        self._fs.makedirs(self.log_dir, exist_ok=True)

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        """Keep one row: the metrics (tensors as numbers) and ``step`` (by default the number of rows kept)."""
        row = {key: _scalar(value) for key, value in metrics_dict.items()}
        row[STEP_KEY] = len(self.metrics) if step is None else step
        self.metrics.append(row)

    def save(self) -> None:
        """Append the kept rows to the file (rewriting it where new columns appeared), then forget them."""
        if not self.metrics:
            return
        new_keys = self._record_new_keys()
        exists = self._fs.isfile(self.metrics_file_path)
        if new_keys and exists:
            self._rewrite_with_new_header(self.metrics_keys)
        with self._fs.open(self.metrics_file_path, mode="a" if exists else "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            if not exists:
                writer.writeheader()
            writer.writerows(self.metrics)
        self.metrics = []

    def _record_new_keys(self) -> set[str]:
        new_keys = set().union(*self.metrics) - set(self.metrics_keys)
        self.metrics_keys.extend(new_keys)
        self.metrics_keys.sort()
        return new_keys

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            rows = list(csv.DictReader(file))
        with self._fs.open(self.metrics_file_path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)

    def _check_log_dir_exists(self) -> None:
        if self._fs.exists(self.log_dir) and self._fs.listdir(self.log_dir):
            rank_zero_warn(
                f"Experiment logs directory {self.log_dir} exists and is not empty. Previous log files in this "
                "directory will be deleted when the new ones are saved!"
            )
            if self._fs.isfile(self.metrics_file_path):
                self._fs.rm_file(self.metrics_file_path)


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
