"""CSVLogger: versions, folders, the CSV file, flushing, and rank-zero-only writes."""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core.errors import FabricCoreWarning, InvalidConfigError
from fabric_core.loggers.csv_logs import CSVLogger
from fabric_core.loggers.logger import Logger
from fabric_core.utilities.rank_zero import rank_zero_only


@pytest.fixture(autouse=True)
def _rank_zero() -> Iterator[None]:
    rank_zero_only.rank = 0
    yield
    rank_zero_only.reset()


def _read(logger: CSVLogger) -> tuple[list[str], list[dict[str, str]]]:
    with open(logger.metrics_file_path, newline="") as file:
        reader = csv.DictReader(file)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


# -- versions and folders -------------------------------------------------------------------------------


def test_is_a_logger_with_lightning_defaults(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    assert isinstance(logger, Logger)
    assert logger.name == "lightning_logs"
    assert logger.root_dir == str(tmp_path)
    assert logger.version == 0
    assert logger.log_dir == str(tmp_path / "lightning_logs" / "version_0")


def test_next_version_is_one_past_the_highest_existing(tmp_path: Path) -> None:
    root = tmp_path / "lightning_logs"
    for folder in ("version_0", "version_3", "version_x", "other"):
        (root / folder).mkdir(parents=True)
    (root / "version_9").write_text("a file, not a version folder")
    assert CSVLogger(tmp_path).version == 4


def test_version_is_decided_once(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    assert logger.version == 0
    (tmp_path / "lightning_logs" / "version_0").mkdir(parents=True)
    assert logger.version == 0
    assert CSVLogger(tmp_path).version == 1


def test_integer_and_string_versions(tmp_path: Path) -> None:
    assert CSVLogger(tmp_path, version=5).log_dir == str(tmp_path / "lightning_logs" / "version_5")
    assert CSVLogger(tmp_path, name="exp", version="best").log_dir == str(tmp_path / "exp" / "best")


def test_empty_name_puts_versions_directly_under_root(tmp_path: Path) -> None:
    (tmp_path / "version_2").mkdir()
    logger = CSVLogger(tmp_path, name="")
    assert logger.log_dir == str(tmp_path / "version_3")


def test_the_version_folder_is_created_with_the_experiment_as_in_lightning(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path / "logs")
    _ = logger.log_dir
    assert not (tmp_path / "logs").exists()
    logger.log_metrics({"a": 1.0})  # the first row creates the writer, and with it the folder
    assert Path(logger.log_dir).is_dir() and not Path(logger.metrics_file_path).exists()
    logger.save()
    assert Path(logger.metrics_file_path).is_file()
    CSVLogger(tmp_path / "never").finalize("success")  # nothing logged, nothing saved: nothing written
    assert not (tmp_path / "never").exists()


# -- the CSV file ---------------------------------------------------------------------------------------


def test_rows_and_header_with_default_steps(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"loss": 0.5, "acc": 0.1})
    logger.log_metrics({"loss": 0.25, "acc": 0.2})
    logger.save()
    header, rows = _read(logger)
    assert header == ["acc", "loss", "step"]
    assert rows == [{"acc": "0.1", "loss": "0.5", "step": "0"}, {"acc": "0.2", "loss": "0.25", "step": "1"}]


def test_explicit_steps_are_written(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=10)
    logger.save()
    assert _read(logger)[1] == [{"loss": "1.0", "step": "10"}]


def test_header_is_sorted_with_step_among_the_keys(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"zeta": 1, "alpha": 2})
    logger.save()
    assert _read(logger)[0] == ["alpha", "step", "zeta"]


def test_header_is_rewritten_when_new_keys_appear(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"b": 1}, step=0)
    logger.save()
    logger.log_metrics({"a": 2}, step=1)
    logger.log_metrics({"b": 3}, step=2)
    logger.save()
    header, rows = _read(logger)
    assert header == ["a", "b", "step"]
    assert rows == [
        {"a": "", "b": "1", "step": "0"},
        {"a": "2", "b": "", "step": "1"},
        {"a": "", "b": "3", "step": "2"},
    ]
    assert [p.name for p in Path(logger.log_dir).iterdir()] == ["metrics.csv"]


def test_rows_with_known_keys_are_appended(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"a": 1}, step=0)
    logger.save()
    logger.log_metrics({"a": 2}, step=1)
    logger.save()
    text = Path(logger.metrics_file_path).read_text()
    assert text.splitlines() == ["a,step", "1,0", "2,1"]


def test_prefix_is_joined_with_a_dash(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, prefix="train")
    logger.log_metrics({"loss": 1})
    logger.save()
    assert _read(logger)[0] == ["step", "train-loss"]


def test_tensor_values_become_numbers(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    metrics: dict[str, Any] = {"loss": torch.tensor(0.5), "n": torch.tensor(3)}
    logger.log_metrics(metrics)
    logger.save()
    assert _read(logger)[1] == [{"loss": "0.5", "n": "3", "step": "0"}]


# -- flushing -------------------------------------------------------------------------------------------


def test_flushes_every_n_steps(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=2)
    logger.log_metrics({"a": 1})
    assert not Path(logger.metrics_file_path).exists()
    logger.log_metrics({"a": 2})
    assert len(_read(logger)[1]) == 2
    logger.log_metrics({"a": 3})
    assert len(_read(logger)[1]) == 2
    logger.log_metrics({"a": 4})
    assert [r["step"] for r in _read(logger)[1]] == ["0", "1", "0", "1"]  # default steps: see below


def test_default_step_counts_the_rows_waiting_to_be_written(tmp_path: Path) -> None:
    """As in Lightning: without ``step``, a row is numbered by the buffered rows, so it restarts after a write."""
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    for value in range(3):
        logger.log_metrics({"a": value})
    assert [r["step"] for r in _read(logger)[1]] == ["0", "0", "0"]


def test_default_flush_interval_is_100(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    for value in range(99):
        logger.log_metrics({"a": value})
    assert not Path(logger.metrics_file_path).exists()
    logger.log_metrics({"a": 99})
    assert len(_read(logger)[1]) == 100


def test_finalize_writes_what_is_buffered(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"a": 1})
    logger.finalize("success")
    assert _read(logger)[1] == [{"a": "1", "step": "0"}]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True])
def test_invalid_flush_interval_is_rejected(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidConfigError, match=r"flush_logs_every_n_steps=.*integer >= 1"):
        CSVLogger(tmp_path, flush_logs_every_n_steps=bad)  # type: ignore[arg-type]


# -- reuse, hyperparameters, ranks ----------------------------------------------------------------------


def test_reusing_a_non_empty_version_folder_warns_and_replaces_its_metrics(tmp_path: Path) -> None:
    first = CSVLogger(tmp_path, version=0)
    first.log_metrics({"old": 1})
    first.save()

    second = CSVLogger(tmp_path, version=0)
    # As in Lightning: when the writer is created (here by the first row), not at the first write.
    with pytest.warns(FabricCoreWarning, match=r"Experiment logs directory .*version_0 exists and is not empty"):
        second.log_metrics({"new": 2})
    assert not Path(second.metrics_file_path).exists()  # the old file is gone at once
    second.save()
    assert _read(second) == (["new", "step"], [{"new": "2", "step": "0"}])


def test_fresh_version_folder_does_not_warn(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    logger.log_metrics({"a": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logger.save()


def test_log_hyperparams_is_not_supported(tmp_path: Path) -> None:
    with pytest.raises(
        NotImplementedError, match=re.escape("The `CSVLogger` does not yet support logging hyperparameters.")
    ):
        CSVLogger(tmp_path).log_hyperparams({"lr": 0.1})


def test_other_ranks_write_nothing(tmp_path: Path) -> None:
    rank_zero_only.rank = 1
    logger = CSVLogger(tmp_path, flush_logs_every_n_steps=1)
    logger.log_metrics({"a": 1})
    logger.save()
    logger.finalize("success")
    assert logger.log_hyperparams({"lr": 0.1}) is None
    assert list(tmp_path.iterdir()) == []
    rank_zero_only.rank = 0
    logger.finalize("success")
    assert not (tmp_path / "lightning_logs").exists()  # rank 1's rows were never buffered


def test_default_steps_are_lightnings(tmp_path: Path) -> None:
    """``log_metrics(..., step=None)`` numbers a row by the rows waiting to be written, as Lightning's logger does
    (LitGPT's final validation row is logged that way: both loggers must write the same step)."""
    lightning = pytest.importorskip("lightning_fabric.loggers")
    files = []
    for index, logger_class in enumerate((CSVLogger, lightning.CSVLogger)):
        logger = logger_class(tmp_path / str(index), name="run", flush_logs_every_n_steps=3)
        for i in range(7):
            logger.log_metrics({"a": float(i)}, step=i if i % 2 else None)
        logger.log_metrics({"b": 1.0})
        logger.save()
        files.append(next((tmp_path / str(index)).rglob("metrics.csv")).read_text())
    assert files[0] == files[1]
    assert [row.split(",")[-1] for row in files[0].splitlines()[1:]] == ["0", "1", "2", "3", "1", "5", "0", "1"]
