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
from fabric_core.io._remote import _url_to_fs, get_filesystem
from fabric_core.io.atomic import atomic_write
from fabric_core.loggers.logger import Logger, VersionFolders, next_version, rank_zero_experiment, warn_not_reattached
from fabric_core.utilities.logger import _add_prefix
from fabric_core.utilities.rank_zero import rank_zero_only, rank_zero_warn

__all__ = ["CSVLogger"]

STEP_KEY: Final = "step"


def _scalar(value: Any) -> Any:
    if type(value) is float or type(value) is int:  # what `fabric.log` passes on: nothing to look up
        return value
    # Tensors and numpy scalars both expose `.item()`; duck typing keeps torch out of this module.
    item = getattr(value, "item", None)
    return item() if callable(item) else value


class CSVLogger(VersionFolders, Logger):
    """Write metrics to ``<root_dir>/<name>/version_<N>/metrics.csv``, one row per ``log_metrics`` call.

    The rows go through :attr:`experiment`, the writer that keeps them and appends them to the file every
    ``flush_logs_every_n_steps`` steps, on :meth:`save` and in :meth:`finalize` (see :class:`_ExperimentWriter`).
    The writer, and with it the version folder, is created at the first ``log_metrics`` or ``save``; a version
    folder that already holds files is warned about then and its ``metrics.csv`` replaced. Only global rank 0
    writes.

    A job resumed from a run checkpoint (:class:`fabric_core.RunCheckpoints`) continues the same version: the
    rows logged up to the checkpoint are kept, those logged after it (the interrupted part, which the resumed
    job logs again) are dropped, and new rows are appended under the same header.

    Args:
        root_dir: Folder holding every experiment (a local path or an fsspec URL).
        name: Experiment name, a subfolder of ``root_dir`` (empty or ``None`` for none).
        version: ``None`` takes the next free ``version_<N>``; an int selects ``version_<int>``; a string is
            used as the folder name as it is.
        prefix: Prepended to every metric name, joined with :attr:`LOGGER_JOIN_CHAR`.
        flush_logs_every_n_steps: How many steps to keep between writes.

    Raises:
        InvalidConfigError: ``flush_logs_every_n_steps`` is not a positive integer.
    """

    #: Joins ``prefix`` and a metric name (Lightning's name; a subclass may change it).
    LOGGER_JOIN_CHAR: ClassVar[str] = "-"

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
        # Lightning's attribute names: lightning.pytorch's CSVLogger subclasses this one and reads them.
        self._root_dir = os.fspath(root_dir)
        self._name = name or ""
        self._version = version
        self._prefix = prefix
        self._fs = get_filesystem(self._root_dir)
        self._experiment: _ExperimentWriter | None = None
        self._flush_logs_every_n_steps = flush_logs_every_n_steps
        self._keep_rows: int | None = None  # resuming: how many rows of the version's file to keep

    @property
    def log_dir(self) -> str:
        """Folder this version writes to: ``root_dir/name/version_<N>`` (or the version string)."""
        version = self.version
        folder = version if isinstance(version, str) else f"version_{version}"
        return os.path.join(self._root_dir, self.name, folder)

    @property
    @rank_zero_experiment
    def experiment(self) -> _ExperimentWriter:
        """The writer of this version's file (created on first use); a do-nothing object on ranks other than 0."""
        if self._experiment is None:
            self._fs.makedirs(self._root_dir, exist_ok=True)
            self._experiment = _ExperimentWriter(self.log_dir, keep_rows=self._keep_rows)
        return self._experiment

    @property
    def metrics_file_path(self) -> str:
        """The CSV file this logger writes (a shortcut to ``experiment.metrics_file_path`` that creates nothing)."""
        return os.path.join(self.log_dir, _ExperimentWriter.NAME_METRICS_FILE)

    @rank_zero_only
    def log_hyperparams(self, params: Mapping[str, Any] | Any, *args: Any, **kwargs: Any) -> None:
        """Not supported by this logger.

        Raises:
            NotImplementedError: Always (on rank 0).
        """
        raise NotImplementedError("The `CSVLogger` does not yet support logging hyperparameters.")

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Keep one row of metrics; write the kept rows every ``flush_logs_every_n_steps`` steps.

        Args:
            metrics: Metric names and scalar values (numbers, or one-element tensors / numpy scalars).
            step: The step of this row; ``None`` uses the number of rows waiting to be written, as Lightning's
                logger does (so it restarts at 0 after each write: pass ``step`` for a running count).
        """
        metrics = _add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)
        if step is None:
            step = len(self.experiment.metrics)
        self.experiment.log_metrics(metrics, step)
        if (step + 1) % self._flush_logs_every_n_steps == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        """Write the kept rows to the CSV file."""
        self.experiment.save()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Write what is still kept at the end of the run; nothing when nothing was ever logged.

        Args:
            status: How the run ended (``"success"``, ``"failed"``, ...); not recorded.
        """
        if self._experiment is not None:
            self.save()

    def run_identity(self) -> dict[str, Any]:
        """The version and the number of rows in its file; the kept rows are written first."""
        self.save()
        return {"version": self.version, "rows": 0 if self._experiment is None else self._experiment.rows_written}

    def reattach(self, identity: Mapping[str, Any]) -> None:
        """Continue the version of ``identity``, keeping its first ``rows`` rows (see :meth:`run_identity`)."""
        version, rows = identity.get("version"), identity.get("rows")
        if not isinstance(version, (int, str)) or not isinstance(rows, int):
            rank_zero_warn(f"CSVLogger: the run checkpoint's identity {dict(identity)!r} is not one; not reattached.")
            return
        if self._experiment is not None:
            warn_not_reattached(self, self.version, version)
            return
        self._version, self._keep_rows = version, rows
        if rank_zero_only.rank == 0 and self._fs.isfile(self.metrics_file_path):
            _ = self.experiment  # drop the rows logged after the checkpoint now, even if nothing is logged again

    def _get_next_version(self) -> int:
        return next_version(self._fs, os.path.join(self._root_dir, self.name))


class _ExperimentWriter:
    """Lightning's metrics writer behind ``CSVLogger.experiment`` (``lightning.pytorch``'s writer subclasses it).

    Rows are kept in ``metrics`` until :meth:`save` appends them to ``<log_dir>/metrics.csv``; a new column
    rewrites the file with the wider header (all at once on a local disk). The folder is created at once; a
    ``metrics.csv`` already in it is deleted, with a warning when the folder holds anything. Paths are served
    by fsspec, so remote folders work too.

    Args:
        log_dir: The folder to write to.
        keep_rows: Resuming (see ``CSVLogger.reattach``): continue the folder's ``metrics.csv``, keeping its
            header and its first ``keep_rows`` rows, instead of starting a new file.
    """

    NAME_METRICS_FILE = "metrics.csv"

    def __init__(self, log_dir: str, keep_rows: int | None = None) -> None:
        self.metrics: list[dict[str, float]] = []
        self.metrics_keys: list[str] = []
        self._fs = get_filesystem(log_dir)
        self.log_dir = log_dir
        self.metrics_file_path = os.path.join(self.log_dir, self.NAME_METRICS_FILE)
        #: Rows in the file: what a run checkpoint records, so that a resumed job keeps exactly these.
        self.rows_written = 0
        if keep_rows is None:
            self._check_log_dir_exists()
        else:
            self._continue(keep_rows)
        self._fs.makedirs(self.log_dir, exist_ok=True)

    def log_metrics(self, metrics_dict: Mapping[str, Any], step: int | None = None) -> None:
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
        self.rows_written += len(self.metrics)
        self.metrics = []

    def _record_new_keys(self) -> set[str]:
        new_keys = set().union(*self.metrics) - set(self.metrics_keys)
        self.metrics_keys.extend(new_keys)
        self.metrics_keys.sort()
        return new_keys

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        self._replace_file(fieldnames, self._read_rows()[1])

    def _check_log_dir_exists(self) -> None:
        # The profiler callback's traces (its `profiler` folder) may be written before the first metrics.
        if self._fs.exists(self.log_dir) and any(
            os.path.basename(str(entry).rstrip("/")) != "profiler" for entry in self._fs.listdir(self.log_dir, False)
        ):
            rank_zero_warn(
                f"Experiment logs directory {self.log_dir} exists and is not empty. Previous log files in this "
                "directory will be deleted when the new ones are saved!"
            )
            if self._fs.isfile(self.metrics_file_path):
                self._fs.rm_file(self.metrics_file_path)

    def _continue(self, keep_rows: int) -> None:
        """Take over the folder's file: its header, and its first ``keep_rows`` rows."""
        if not self._fs.isfile(self.metrics_file_path):
            return
        fieldnames, rows = self._read_rows()
        self.metrics_keys = fieldnames
        if len(rows) > keep_rows:
            self._replace_file(fieldnames, rows[:keep_rows])
        self.rows_written = min(len(rows), keep_rows)

    def _read_rows(self) -> tuple[list[str], list[dict[str, str]]]:
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            reader = csv.DictReader(file)
            rows = list(reader)
            return list(reader.fieldnames or []), rows

    def _replace_file(self, fieldnames: list[str], rows: list[dict[str, Any]]) -> None:
        """Write the file anew with ``fieldnames`` as its header; a local file is replaced all at once."""
        from fsspec.implementations.local import LocalFileSystem

        fs, path = _url_to_fs(self.metrics_file_path)
        if not isinstance(fs, LocalFileSystem):
            with fs.open(path, "w", newline="") as file:
                _write_csv(file, fieldnames, rows)
            return
        with atomic_write(Path(path)) as raw:
            text = io.TextIOWrapper(raw, newline="", encoding="utf-8")
            _write_csv(text, fieldnames, rows)
            # Flush the text layer and let go of the raw file: atomic_write fsyncs, closes and renames it.
            text.flush()
            text.detach()


def _write_csv(file: Any, fieldnames: list[str], rows: list[dict[str, Any]]) -> None:
    writer = csv.DictWriter(file, fieldnames=fieldnames, restval="")
    writer.writeheader()
    writer.writerows(rows)


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
