"""TensorBoardLogger writes real event files; every test reads them back with tensorboard's reader."""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from fabric_core.errors import FabricCoreWarning
from fabric_core_tensorboard import TensorBoardLogger


def _events(path: str | Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def _scalars(path: str | Path, tag: str) -> list[tuple[int, float]]:
    # Event files store float32; rounding makes 0.1 compare equal to what was logged.
    return [(e.step, round(e.value, 6)) for e in _events(path).Scalars(tag)]


def _hparams(path: str | Path) -> dict[str, Any]:
    content = _events(path).PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    out: dict[str, Any] = {}
    for key, value in info.hparams.items():
        kind = value.WhichOneof("kind")
        out[key] = getattr(value, kind)
    return out


def _metric_names(path: str | Path) -> list[str]:
    content = _events(path).PluginTagToContent("hparams")["_hparams_/experiment"]
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content).experiment
    return [m.name.tag for m in experiment.metric_infos]


def _files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


# --- layout and versions -------------------------------------------------------------------------


def test_log_dir_is_root_name_version(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    assert logger.name == "lightning_logs"
    assert logger.version == 0
    assert logger.root_dir == str(tmp_path)  # the root, as in Lightning; the experiment is a subfolder
    assert logger.log_dir == str(tmp_path / "lightning_logs" / "version_0")


def test_nothing_is_created_before_the_writer(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    _ = logger.log_dir
    logger.finalize("success")  # nothing logged: nothing to close
    assert list(tmp_path.iterdir()) == []
    # save() creates the writer and so the version folder, as Lightning's does: lightning.pytorch's logger
    # then writes hparams.yaml into it.
    logger.save()
    assert Path(logger.log_dir).is_dir()
    logger.finalize("success")


def test_next_version_is_highest_existing_plus_one(tmp_path: Path) -> None:
    for name in ("version_0", "version_3", "version_x", "other"):
        (tmp_path / "exp" / name).mkdir(parents=True)
    (tmp_path / "exp" / "version_9").write_text("a file, not a version folder")
    assert TensorBoardLogger(tmp_path, name="exp").version == 4


def test_versions_increment_across_runs(tmp_path: Path) -> None:
    first = TensorBoardLogger(tmp_path)
    first.log_metrics({"loss": 1.0}, step=0)
    first.finalize("success")
    second = TensorBoardLogger(tmp_path)
    assert second.version == 1
    assert second.log_dir.endswith("version_1")


def test_int_and_str_versions(tmp_path: Path) -> None:
    assert TensorBoardLogger(tmp_path, version=7).log_dir == str(tmp_path / "lightning_logs" / "version_7")
    assert TensorBoardLogger(tmp_path, version="best").log_dir == str(tmp_path / "lightning_logs" / "best")


def test_empty_name_writes_versions_into_root_dir(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, name="")
    assert logger.root_dir == str(tmp_path)
    assert logger.log_dir == str(tmp_path / "version_0")


def test_sub_dir_is_inside_the_version_folder(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, sub_dir="val")
    logger.log_metrics({"acc": 0.5}, step=2)
    logger.finalize("success")
    expected = tmp_path / "lightning_logs" / "version_0" / "val"
    assert logger.log_dir == str(expected)
    assert _scalars(expected, "acc") == [(2, 0.5)]


def test_root_dir_and_sub_dir_expand_env_vars_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FC_TB_SUB", "evaluation")
    logger = TensorBoardLogger("~/runs", name="exp", sub_dir="$FC_TB_SUB")
    assert logger.log_dir == str(tmp_path / "home" / "runs" / "exp" / "version_0" / "evaluation")
    assert logger.root_dir == "~/runs"  # kept as given, as in Lightning


def test_root_dir_and_log_dir_are_lightnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lightning_tensorboard = pytest.importorskip("lightning_fabric.loggers.tensorboard")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "runs" / "exp" / "version_2").mkdir(parents=True)
    for kwargs in ({"name": "exp"}, {"name": "exp", "version": "best", "sub_dir": "val"}, {"name": ""}):
        ours = TensorBoardLogger("~/runs", **kwargs)
        theirs = lightning_tensorboard.TensorBoardLogger("~/runs", **kwargs)
        assert (ours.root_dir, ours.log_dir, ours.version) == (theirs.root_dir, theirs.log_dir, theirs.version)
    assert TensorBoardLogger("~/runs", name="exp").version == 3


# --- metrics ---------------------------------------------------------------------------------------


def test_scalars_are_written_with_their_steps(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    for step, loss in enumerate([0.5, 0.25, 0.125]):
        logger.log_metrics({"train/loss": loss, "lr": 0.1}, step=step * 10)
    logger.finalize("success")
    assert _scalars(logger.log_dir, "train/loss") == [(0, 0.5), (10, 0.25), (20, 0.125)]
    assert _scalars(logger.log_dir, "lr") == [(0, 0.1), (10, 0.1), (20, 0.1)]


def test_tensor_metrics_are_logged_as_numbers(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"loss": torch.tensor(1.5), "count": torch.tensor([3])}, step=1)
    logger.finalize("success")
    assert _scalars(logger.log_dir, "loss") == [(1, 1.5)]
    assert _scalars(logger.log_dir, "count") == [(1, 3.0)]


def test_dict_values_become_scalar_groups(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"loss": {"train": 1.0, "val": torch.tensor(2.0)}}, step=5)
    logger.finalize("success")
    assert _scalars(Path(logger.log_dir) / "loss_train", "loss") == [(5, 1.0)]
    assert _scalars(Path(logger.log_dir) / "loss_val", "loss") == [(5, 2.0)]


def test_prefix_is_joined_with_a_dash(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, prefix="fold1")
    logger.log_metrics({"loss": 0.5}, step=3)
    logger.finalize("success")
    assert _events(logger.log_dir).Tags()["scalars"] == ["fold1-loss"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [("high", "'high'"), ([1.0, 2.0], "[1.0, 2.0]"), (None, "None"), (torch.ones(2), "shape (2,)")],
)
def test_bad_metric_value_raises_naming_the_metric(tmp_path: Path, value: Any, shown: str) -> None:
    logger = TensorBoardLogger(tmp_path)
    with pytest.raises(ValueError, match="'bad_metric'") as info:
        logger.log_metrics({"good": 1.0, "bad_metric": value}, step=0)
    assert shown in str(info.value)
    # The batch is rejected whole: not even the good metric was written.
    logger.finalize("failed")
    assert list(tmp_path.iterdir()) == []


def test_numpy_values_are_logged_as_numbers(tmp_path: Path) -> None:
    import numpy as np

    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"zero_d": np.array(0.5), "one": np.array([0.25]), "f32": np.float32(1.5)}, step=2)
    logger.finalize("success")
    assert [_scalars(logger.log_dir, tag) for tag in ("zero_d", "one", "f32")] == [[(2, 0.5)], [(2, 0.25)], [(2, 1.5)]]


def test_a_refused_value_is_named_in_lightnings_words(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"you tried to log 'high' which is currently not supported. Try a dict"):
        TensorBoardLogger(tmp_path).log_metrics({"bad_metric": "high"})


def test_bad_value_inside_a_group_names_the_group_and_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'loss/val'"):
        TensorBoardLogger(tmp_path).log_metrics({"loss": {"val": "nan?"}})


def test_writer_kwargs_reach_the_summary_writer(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, filename_suffix=".fctest")
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.finalize("success")
    names = [p.name for p in _files_under(tmp_path)]
    assert len(names) == 1 and names[0].endswith(".fctest")


# --- hyperparameters ---------------------------------------------------------------------------------


def test_hyperparams_are_flattened_and_sanitized(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    params = {
        "lr": 0.01,
        "batch_size": 8,
        "use_amp": True,
        "optimizer": {"name": "adam", "betas": (0.9, 0.999), "sched": {"gamma": 0.5}},
        "activation": torch.nn.ReLU,
        "extra": None,
        "scale": torch.tensor(2.0),
    }
    logger.log_hyperparams(params)
    logger.finalize("success")
    assert _hparams(logger.log_dir) == {
        "lr": pytest.approx(0.01),
        "batch_size": 8.0,
        "use_amp": 1.0,
        "optimizer/name": "adam",
        "optimizer/betas": "(0.9, 0.999)",
        "optimizer/sched/gamma": 0.5,
        "activation": str(torch.nn.ReLU),
        "extra": "None",
        "scale": 2.0,
    }


def test_namespace_params_are_accepted(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams(argparse.Namespace(epochs=3, data=argparse.Namespace(root="/data")))
    logger.finalize("success")
    assert _hparams(logger.log_dir) == {"epochs": 3.0, "data/root": "/data"}


def test_default_hp_metric_is_minus_one(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.1})
    logger.finalize("success")
    assert _scalars(logger.log_dir, "hp_metric") == [(0, -1.0)]
    assert _metric_names(logger.log_dir) == ["hp_metric"]


def test_no_hp_metric_when_disabled(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, default_hp_metric=False)
    logger.log_hyperparams({"lr": 0.1})
    logger.finalize("success")
    assert "hp_metric" not in _events(logger.log_dir).Tags()["scalars"]
    assert _hparams(logger.log_dir) == {"lr": pytest.approx(0.1)}
    assert _metric_names(logger.log_dir) == []


def test_hyperparams_with_metrics_and_step(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, prefix="cv")
    logger.log_hyperparams({"lr": 0.1}, metrics={"acc": 0.75}, step=4)
    logger.finalize("success")
    assert _scalars(logger.log_dir, "cv-acc") == [(4, 0.75)]
    assert _metric_names(logger.log_dir) == ["cv-acc"]


def test_a_bare_number_metric_is_the_hp_metric(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    logger.log_hyperparams({"lr": 0.1}, metrics=0.9, step=2)
    logger.finalize("success")
    assert _scalars(logger.log_dir, "hp_metric") == [(2, 0.9)]


def test_params_of_another_type_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"mapping or an argparse\.Namespace, got list"):
        TensorBoardLogger(tmp_path).log_hyperparams([("lr", 0.1)])  # type: ignore[arg-type]


# --- graph, save, finalize, pickling -----------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_log_graph_writes_the_traced_graph(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    logger.log_graph(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU()), torch.zeros(1, 3))
    logger.finalize("success")
    graph = _events(logger.log_dir).Graph()
    assert any("Linear" in node.name or "linear" in node.op for node in graph.node)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_log_graph_uses_example_input_array(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    model.example_input_array = torch.zeros(1, 2)
    logger = TensorBoardLogger(tmp_path)
    logger.log_graph(model)
    logger.finalize("success")
    assert len(_events(logger.log_dir).Graph().node) > 0


def test_log_graph_without_input_warns_and_writes_nothing(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path)
    with pytest.warns(
        FabricCoreWarning, match="Could not log computational graph to TensorBoard: .*input_array"
    ) as record:
        logger.log_graph(torch.nn.Linear(2, 1))
    assert record[0].filename == __file__
    assert list(tmp_path.iterdir()) == []


def test_log_graph_of_an_untraceable_input_warns_instead_of_ending_the_run(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 1)
    model.example_input_array = {"x": torch.zeros(1, 2)}  # a dict: not positional arguments
    logger = TensorBoardLogger(tmp_path)
    with pytest.warns(FabricCoreWarning, match="can't be traced by TensorBoard"):
        logger.log_graph(model)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_log_graph_of_a_set_up_module_traces_the_module_inside(tmp_path: Path) -> None:
    from fabric_core import Fabric

    model = Fabric(accelerator="cpu", devices=1).setup_module(torch.nn.Sequential(torch.nn.Linear(3, 2)))
    logger = TensorBoardLogger(tmp_path)
    logger.log_graph(model, torch.zeros(1, 3))
    logger.finalize("success")
    names = [node.name for node in _events(logger.log_dir).Graph().node]
    assert names and not any("_forward_module" in name for name in names), names


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
def test_log_graph_applies_a_lightning_modules_batch_transfer_hooks(tmp_path: Path) -> None:
    seen: list[str] = []

    class WithBatchHooks(torch.nn.Linear):
        def _on_before_batch_transfer(self, batch: torch.Tensor) -> torch.Tensor:
            seen.append("before")
            return batch.double()

        def _apply_batch_transfer_handler(self, batch: torch.Tensor) -> torch.Tensor:
            seen.append("transfer")
            return batch.float()

    logger = TensorBoardLogger(tmp_path)
    logger.log_graph(WithBatchHooks(3, 2), torch.zeros(1, 3))
    logger.finalize("success")
    assert seen == ["before", "transfer"]
    assert len(_events(logger.log_dir).Graph().node) > 0


def test_sanitize_params_keeps_what_the_hparams_tab_shows() -> None:
    import numpy as np

    params = {"lr": 0.1, "n": np.int64(3), "t": torch.tensor(2.0), "big": torch.ones(2, 2), "l": [1, 2], "x": None}
    assert TensorBoardLogger._sanitize_params(params) == {
        "lr": 0.1,
        "n": 3,
        "t": 2.0,
        "big": str(torch.ones(2, 2)),
        "l": "[1, 2]",
        "x": "None",
    }


def test_save_flushes_to_disk(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, max_queue=1000, flush_secs=10_000)
    logger.log_metrics({"loss": 0.5}, step=1)
    logger.save()
    assert _scalars(logger.log_dir, "loss") == [(1, 0.5)]


def test_finalize_closes_the_writer(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, max_queue=1000, flush_secs=10_000)
    logger.log_metrics({"loss": 0.5}, step=1)
    writer = logger.experiment
    assert writer.file_writer is not None
    logger.finalize("success")
    assert writer.file_writer is None and writer.all_writers is None
    assert _scalars(logger.log_dir, "loss") == [(1, 0.5)]
    logger.finalize("success")  # a second close is harmless


def test_pickling_leaves_the_writer_behind(tmp_path: Path) -> None:
    logger = TensorBoardLogger(tmp_path, name="exp", version=2)
    logger.log_metrics({"loss": 0.5}, step=1)
    copy = pickle.loads(pickle.dumps(logger))
    assert copy.log_dir == logger.log_dir
    assert copy.experiment is not logger.experiment
    copy.finalize("success")
    logger.finalize("success")


# --- ranks and backends ------------------------------------------------------------------------------


def test_experiment_is_the_torch_summary_writer(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    assert isinstance(TensorBoardLogger(tmp_path).experiment, SummaryWriter)


def test_other_ranks_write_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils.tensorboard import SummaryWriter

    from fabric_core.utilities.rank_zero import rank_zero_only

    # How a launcher announces the second process.
    monkeypatch.setenv("RANK", "1")
    assert rank_zero_only.rank == 1
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.log_hyperparams({"lr": 0.1})
    logger.log_graph(torch.nn.Linear(2, 1), torch.zeros(1, 2))
    logger.experiment.add_histogram("w", torch.ones(3), 0)
    logger.save()
    logger.finalize("success")
    assert list(tmp_path.iterdir()) == []
    assert not isinstance(logger.experiment, SummaryWriter)


def test_tensorboardx_is_the_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorboardX

    with monkeypatch.context() as blocked:
        blocked.setitem(sys.modules, "tensorboard", None)
        logger = TensorBoardLogger(tmp_path)
        assert isinstance(logger.experiment, tensorboardX.SummaryWriter)
        logger.log_metrics({"loss": 0.25}, step=7)
        logger.log_hyperparams({"lr": 0.1, "opt": "sgd"})
        logger.finalize("success")
    assert _scalars(logger.log_dir, "loss") == [(7, 0.25)]
    assert _hparams(logger.log_dir) == {"lr": pytest.approx(0.1), "opt": "sgd"}


def test_missing_tensorboard_and_tensorboardx_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ModuleNotFoundError, match="pip install tensorboard"):
        TensorBoardLogger(tmp_path)
    assert not os.listdir(tmp_path)
