"""The loggers' differential cases: ``python logger_differential_job.py PACKAGE OUT_DIR`` runs every case below.

Each case is a ``tests/compat`` ``Case`` run against one package (``lightning_fabric`` or ``fabric_core``) in
this process, alone (so that no other package is imported here); ``OUT_DIR/result.json`` holds
``{case id: {"value": ...} | {"error": [builtin classes of its MRO], "type": ..., "message": ...}}``.
``tests/loggers/test_logger_differential.py`` runs it once per package and compares the two files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))

from compat_cases import Case, _sub, run

# -- helpers ---------------------------------------------------------------------------------------------


def _rel(path: str, tmp: Path) -> str:
    return os.path.relpath(path, tmp)


def _files(root: Path) -> list[str]:
    """Files and folders under ``root``, event files named without their time, host and pid."""
    entries = []
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        name = re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents", name)
        entries.append(name + ("/" if path.is_dir() else ""))
    return entries


def _events(log_dir: str) -> dict[str, Any]:
    """What an event folder holds: scalars (rounded as float32 stores them), hyperparameters, a graph or not."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    out: dict[str, Any] = {
        "scalars": {tag: [[e.step, round(e.value, 5)] for e in events.Scalars(tag)] for tag in tags["scalars"]},
        "graph": tags["graph"],
    }
    try:
        hparams = events.PluginTagToContent("hparams")
    except KeyError:  # no hyperparameters in this folder
        hparams = {}
    if "_hparams_/session_start_info" in hparams:
        data = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/session_start_info"])
        values = data.session_start_info.hparams
        out["hparams"] = {key: getattr(value, str(value.WhichOneof("kind"))) for key, value in values.items()}
        experiment = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/experiment"]).experiment
        out["hparam_metrics"] = [info.name.tag for info in experiment.metric_infos]
    return out


def _warnings_during(fn: Any) -> list[tuple[bool, str]]:
    """``fn()``'s warnings: whether each is a ``UserWarning``, and its text."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [(issubclass(w.category, UserWarning), str(w.message)) for w in caught]


@contextlib.contextmanager
def _on_rank(lib: Any, rank: int) -> Iterator[None]:
    rank_zero_only = _sub(lib, "utilities.rank_zero").rank_zero_only
    before = rank_zero_only.rank
    rank_zero_only.rank = rank  # how Lightning's tests and launchers set it (ours is a property)
    try:
        yield
    finally:
        rank_zero_only.rank = before


# -- CSVLogger -------------------------------------------------------------------------------------------


def _csv_experiment_is_the_writer(lib: Any, tmp: Path) -> Any:
    csv_logs = _sub(lib, "loggers.csv_logs")
    logger = csv_logs.CSVLogger(root_dir=tmp, name="exp", flush_logs_every_n_steps=10)
    created_before = logger._experiment is not None
    logger.log_metrics({"loss": 0.5}, step=0)
    logger.log_metrics({"loss": 0.25, "acc": 1.0})
    writer = logger.experiment
    seen = {
        "created_before_logging": created_before,
        "class": type(writer).__name__,
        "is_the_writer_class": isinstance(writer, csv_logs._ExperimentWriter),
        "is_the_logger": writer is logger,
        "kept": writer is logger.experiment is logger._experiment,
        "metrics": writer.metrics,
        "log_dir": _rel(writer.log_dir, tmp),
        "metrics_file_path": _rel(writer.metrics_file_path, tmp),
        "NAME_METRICS_FILE": writer.NAME_METRICS_FILE,
        "files_before_save": _files(tmp),
    }
    logger.save()
    seen.update(metrics_after_save=writer.metrics, metrics_keys=writer.metrics_keys, files=_files(tmp))
    seen["content"] = Path(writer.metrics_file_path).read_text()
    return seen


def _csv_existing_version_warns_when_the_experiment_is_created(lib: Any, tmp: Path) -> Any:
    folder = tmp / "exp" / "version_0"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("old,step\n1,0\n")
    (folder / "notes.txt").write_text("kept")
    logger = _sub(lib, "loggers").CSVLogger(root_dir=tmp, name="exp", version=0)
    at_creation = _warnings_during(lambda: logger.experiment)
    files_after_creation = _files(tmp)
    logger.log_metrics({"new": 2.0}, step=0)
    at_first_write = _warnings_during(logger.save)
    phrase = r"Experiment logs directory .*version_0 exists and is not empty"
    return {
        "at_creation": [(user, bool(re.search(phrase, text))) for user, text in at_creation],
        "at_first_write": len(at_first_write),
        "files_after_creation": files_after_creation,
        "content": (folder / "metrics.csv").read_text(),
    }


def _csv_private_state(lib: Any, tmp: Path) -> Any:
    for name in ("version_4", "version_x", "version_7_old", "other"):
        (tmp / "logs" / name).mkdir(parents=True)
    (tmp / "logs" / "version_9").write_text("a file")
    logger = _sub(lib, "loggers").CSVLogger(tmp / "logs", name=None, prefix="p", flush_logs_every_n_steps=7)
    seen = {
        "_root_dir": _rel(logger._root_dir, tmp),
        "_name": logger._name,
        "_version": logger._version,
        "_prefix": logger._prefix,
        "_flush_logs_every_n_steps": logger._flush_logs_every_n_steps,
        "_fs": type(logger._fs).__name__,
        "_experiment": logger._experiment,
        "_get_next_version": logger._get_next_version(),
        "LOGGER_JOIN_CHAR": logger.LOGGER_JOIN_CHAR,
        "version": logger.version,
    }
    seen["_version_after"] = logger._version
    seen["log_dir"] = _rel(logger.log_dir, tmp)
    return seen


def _csv_default_steps_and_flush(lib: Any, tmp: Path) -> Any:
    logger = _sub(lib, "loggers").CSVLogger(tmp, flush_logs_every_n_steps=3, prefix="train")
    kept = []
    for value in range(5):
        logger.log_metrics({"a": float(value)})
        kept.append([row["step"] for row in logger.experiment.metrics])
    logger.finalize("success")
    return {"kept": kept, "content": next(tmp.rglob("metrics.csv")).read_text()}


def _csv_appends_to_the_file_of_an_earlier_logger(lib: Any, tmp: Path) -> Any:
    csv_logs = _sub(lib, "loggers.csv_logs")
    with mock.patch.object(csv_logs._ExperimentWriter, "_check_log_dir_exists"):
        first = csv_logs.CSVLogger(tmp, name="test", version=0, flush_logs_every_n_steps=1)
        first.log_metrics({"a": 1, "b": 2})
        first.log_metrics({"a": 3, "b": 4})
        second = csv_logs.CSVLogger(tmp, name="test", version=0, flush_logs_every_n_steps=1)
        second.log_metrics({"a": 100, "b": 200})
        second.log_metrics({"a": 5, "c": 6})  # a new column: the file is rewritten with the wider header
    return Path(second.experiment.metrics_file_path).read_text()


def _csv_rewrite_with_new_header(lib: Any, tmp: Path) -> Any:
    csv_logs = _sub(lib, "loggers.csv_logs")
    (tmp / "metrics.csv").write_text("step,metric1,metric2\n0,1,22\n")
    with mock.patch.object(csv_logs._ExperimentWriter, "_check_log_dir_exists"):
        writer = csv_logs._ExperimentWriter(log_dir=str(tmp))
    writer._rewrite_with_new_header(["step", "metric1", "metric2", "metric3"])
    return {"content": (tmp / "metrics.csv").read_text(), "files": _files(tmp)}


def _csv_save_and_finalize_without_metrics(lib: Any, tmp: Path) -> Any:
    loggers = _sub(lib, "loggers")
    loggers.CSVLogger(tmp / "finalized").finalize("success")
    saved = loggers.CSVLogger(tmp / "saved")
    saved.save()
    saved.finalize("success")
    return _files(tmp)


def _csv_other_ranks(lib: Any, tmp: Path) -> Any:
    logger = _sub(lib, "loggers").CSVLogger(tmp, flush_logs_every_n_steps=1)
    with _on_rank(lib, 1):
        experiment = logger.experiment
        logger.log_metrics({"a": 1.0})
        logger.save()
        logger.finalize("success")
        calls = [experiment.log_metrics({"a": 1.0}), experiment[0].save()]
    return {"class": type(experiment).__name__, "calls": calls, "files": _files(tmp)}


# -- TensorBoardLogger ------------------------------------------------------------------------------------


def _tensorboard(lib: Any) -> Any:
    return _sub(lib, "loggers.tensorboard").TensorBoardLogger


def _tb_private_state(lib: Any, tmp: Path) -> Any:
    (tmp / "tb" / "exp" / "version_2").mkdir(parents=True)
    logger = _tensorboard(lib)(tmp / "tb", name="exp", default_hp_metric=False, prefix="p", sub_dir="val", flush_secs=5)
    seen = {
        "_root_dir": _rel(logger._root_dir, tmp),
        "_name": logger._name,
        "_version": logger._version,
        "_sub_dir": logger._sub_dir,
        "_prefix": logger._prefix,
        "_default_hp_metric": logger._default_hp_metric,
        "_kwargs": logger._kwargs,
        "_fs": type(logger._fs).__name__,
        "_experiment": logger._experiment,
        "_get_next_version": logger._get_next_version(),
        "LOGGER_JOIN_CHAR": logger.LOGGER_JOIN_CHAR,
        "log_dir": _rel(logger.log_dir, tmp),
        "sub_dir": logger.sub_dir,
    }
    seen["_version_after"] = logger._version
    return seen


def _tb_save_creates_the_writer(lib: Any, tmp: Path) -> Any:
    tensorboard = _tensorboard(lib)
    tensorboard(tmp / "finalized").finalize("success")
    logger = tensorboard(tmp / "saved")
    logger.save()
    writer = logger._experiment
    logger.finalize("success")
    return {"writer": type(writer).__name__, "kept": writer is logger.experiment, "files": _files(tmp)}


def _tb_metric_values(lib: Any, tmp: Path) -> Any:
    import numpy as np
    import torch

    logger = _tensorboard(lib)(tmp, prefix="p")
    logger.log_metrics({"float": 0.5, "int": 3, "tensor": torch.tensor(0.25), "tensor_1": torch.tensor([2.0])}, 1)
    logger.log_metrics({"np_0d": np.array(0.5), "np_1": np.array([0.75]), "np32": np.float32(1.5)}, step=2)
    logger.log_metrics({"group": {"a": 1.0, "b": 2.0}}, step=3)
    logger.finalize("success")
    groups = {path.name: _events(str(path)) for path in Path(logger.log_dir).iterdir() if path.is_dir()}
    return {"events": _events(logger.log_dir), "groups": groups}


def _tb_refuses_a_string(lib: Any, tmp: Path) -> Any:
    _tensorboard(lib)(tmp).log_metrics({"bad": "high"}, step=0)


def _tb_hyperparams(lib: Any, tmp: Path) -> Any:
    logger = _tensorboard(lib)(tmp)
    logger.log_hyperparams({"lr": 0.1, "opt": {"name": "adam"}, "layers": [1, 2]}, metrics={"acc": 0.5}, step=3)
    logger.finalize("success")
    return _events(logger.log_dir)


def _tb_default_hp_metric(lib: Any, tmp: Path) -> Any:
    logger = _tensorboard(lib)(tmp)
    logger.log_hyperparams({"lr": 0.1, "bs": 8})
    logger.finalize("success")
    return _events(logger.log_dir)


def _tb_other_ranks(lib: Any, tmp: Path) -> Any:
    logger = _tensorboard(lib)(tmp)
    with _on_rank(lib, 1):
        experiment = logger.experiment
        logger.log_metrics({"a": 1.0}, step=0)
        logger.finalize("success")
        calls = [experiment.add_scalar("a", 1.0, 0), experiment[0].flush()]
    return {"class": type(experiment).__name__, "calls": calls, "files": _files(tmp)}


def _tb_graph_without_input(lib: Any, tmp: Path) -> Any:
    import torch

    logger = _tensorboard(lib)(tmp)
    seen = _warnings_during(lambda: logger.log_graph(torch.nn.Linear(2, 1)))
    phrase = r"Could not log computational graph to TensorBoard: The `model.example_input_array` attribute"
    return {"warnings": [(user, bool(re.search(phrase, text))) for user, text in seen], "files": _files(tmp)}


CASES = [
    Case("csv-experiment-is-the-writer", _csv_experiment_is_the_writer),
    Case(
        "csv-existing-version-warns-when-the-experiment-is-created",
        _csv_existing_version_warns_when_the_experiment_is_created,
    ),
    Case("csv-private-state", _csv_private_state),
    Case("csv-default-steps-and-flush", _csv_default_steps_and_flush),
    Case("csv-appends-to-the-file-of-an-earlier-logger", _csv_appends_to_the_file_of_an_earlier_logger),
    Case("csv-rewrite-with-new-header", _csv_rewrite_with_new_header),
    Case("csv-save-and-finalize-without-metrics", _csv_save_and_finalize_without_metrics),
    Case("csv-other-ranks", _csv_other_ranks),
    Case("tb-private-state", _tb_private_state),
    Case("tb-save-creates-the-writer", _tb_save_creates_the_writer),
    Case("tb-metric-values", _tb_metric_values),
    Case(
        "tb-refuses-a-string",
        _tb_refuses_a_string,
        phrase=r"you tried to log .*high.* which is currently not supported",
    ),
    Case("tb-hyperparams", _tb_hyperparams),
    Case("tb-default-hp-metric", _tb_default_hp_metric),
    Case("tb-other-ranks", _tb_other_ranks),
    Case("tb-graph-without-input", _tb_graph_without_input),
]


def main(package: str, out: Path) -> None:
    results: dict[str, Any] = {}
    for case in CASES:
        tmp = out / case.id
        tmp.mkdir(parents=True)
        outcome = run(case, package, tmp)
        if outcome.error is None:
            results[case.id] = {"value": outcome.value}
        else:
            builtins = [cls.__name__ for cls in outcome.error.__mro__ if cls.__module__ == "builtins"]
            results[case.id] = {"error": builtins, "type": outcome.error.__qualname__, "message": outcome.message}
    (out / "result.json").write_text(json.dumps(results, default=repr))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
