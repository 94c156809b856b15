"""Lightning Fabric's remaining public names at their paths under fabric_core, each compared with Lightning's."""

from __future__ import annotations

import operator
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning_fabric")


def test_connector_and_cli_registries_are_the_catalog_views() -> None:
    from lightning_fabric import cli as their_cli
    from lightning_fabric import connector as theirs

    import fabric_core.cli
    import fabric_core.connector
    from fabric_core.accelerators import ACCELERATOR_REGISTRY
    from fabric_core.strategies import STRATEGY_REGISTRY

    assert fabric_core.connector.ACCELERATOR_REGISTRY is ACCELERATOR_REGISTRY
    assert fabric_core.connector.STRATEGY_REGISTRY is STRATEGY_REGISTRY is fabric_core.cli.STRATEGY_REGISTRY
    assert set(theirs.ACCELERATOR_REGISTRY.available_accelerators()) <= set(
        ACCELERATOR_REGISTRY.available_accelerators()
    )
    assert "ddp" in their_cli.STRATEGY_REGISTRY and "ddp" in fabric_core.cli.STRATEGY_REGISTRY
    with pytest.raises(AttributeError, match="no attribute 'NOPE'"):
        _ = fabric_core.connector.NOPE


def test_seed_bounds_are_lightnings() -> None:
    from lightning_fabric.utilities import seed as theirs

    from fabric_core.utilities import seed as ours

    assert (
        (ours.min_seed_value, ours.max_seed_value) == (theirs.min_seed_value, theirs.max_seed_value) == (0, 2**32 - 1)
    )


def test_conversion_dtypes_are_the_ones_convert_to_tensors_applies() -> None:
    from lightning_fabric.utilities.apply_func import CONVERSION_DTYPES as theirs

    from fabric_core.utilities.apply_func import CONVERSION_DTYPES, convert_to_tensors

    their_table = {kind: convert for kind, convert in theirs}
    for kind, convert in CONVERSION_DTYPES:
        value = kind(3)
        made = convert(value, device="cpu")
        assert made.dtype == their_table[kind](value, device="cpu").dtype
        assert made.dtype == convert_to_tensors(value, "cpu").dtype, kind


def test_lightning_deprecation_warning_is_the_deprecation_category() -> None:
    from fabric_core.utilities.rank_zero import LightningDeprecationWarning, rank_zero_deprecation

    assert issubclass(LightningDeprecationWarning, DeprecationWarning)
    with pytest.warns(LightningDeprecationWarning, match="old API"):
        rank_zero_deprecation("old API")


def test_warning_cache_issues_each_message_once_at_the_callers_line() -> None:
    from lightning_fabric.utilities.rank_zero import WarningCache as Theirs

    from fabric_core.utilities.rank_zero import WarningCache

    for cache in (WarningCache(), Theirs()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                cache.warn("once")
                cache.deprecation("deprecated once")
        assert [str(w.message) for w in caught] == ["once", "deprecated once"]
        assert "once" in cache and "deprecated once" in cache
    cache = WarningCache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache.warn("where")
    assert caught[0].filename == __file__


def test_logger_join_char_is_used_for_the_prefix(tmp_path: Path) -> None:
    from lightning_fabric.loggers.csv_logs import CSVLogger as Theirs

    from fabric_core.loggers.csv_logs import CSVLogger

    assert CSVLogger.LOGGER_JOIN_CHAR == Theirs.LOGGER_JOIN_CHAR == "-"

    class Underscored(CSVLogger):
        LOGGER_JOIN_CHAR = "_"

    logger = Underscored(tmp_path, prefix="train")
    logger.log_metrics({"loss": 1.0}, step=0)
    logger.save()
    assert Path(logger.experiment.metrics_file_path).read_text().splitlines()[0] == "step,train_loss"


def test_tensorboard_logger_join_char() -> None:
    tensorboard = pytest.importorskip("fabric_core_tensorboard")
    from lightning_fabric.loggers.tensorboard import TensorBoardLogger as Theirs

    assert tensorboard.TensorBoardLogger.LOGGER_JOIN_CHAR == Theirs.LOGGER_JOIN_CHAR == "-"


def test_rank_zero_experiment_gives_other_ranks_a_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from fabric_core.loggers.logger import rank_zero_experiment
    from fabric_core.utilities.rank_zero import rank_zero_only

    class Holder:
        @property
        @rank_zero_experiment
        def experiment(self) -> list[str]:
            return ["real"]

    monkeypatch.setattr(rank_zero_only, "rank", 0)
    assert Holder().experiment == ["real"]
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    stand_in = Holder().experiment
    assert stand_in != ["real"]
    assert stand_in.add_image("x", 1) is None and stand_in[0].anything() is None
    stand_in["key"] = 1


def test_find_free_network_port_at_lightnings_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from lightning_fabric.plugins.environments.lightning import find_free_network_port as theirs

    from fabric_core.plugins.environments.lightning import find_free_network_port

    port = find_free_network_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # it was free
    monkeypatch.setenv("STANDALONE_PORT", "12345")
    assert find_free_network_port() == theirs() == 12345


def test_distributed_sampler_wrapper_at_lightnings_path_splits_like_lightnings() -> None:
    from lightning_fabric.utilities.distributed import DistributedSamplerWrapper as Theirs
    from torch.utils.data import SequentialSampler

    from fabric_core.utilities.distributed import DistributedSamplerWrapper

    sampler = SequentialSampler(range(10))
    for rank in (0, 1):
        ours = list(DistributedSamplerWrapper(sampler, num_replicas=2, rank=rank, shuffle=False))
        assert ours == list(Theirs(sampler, num_replicas=2, rank=rank, shuffle=False))
        assert ours == list(range(rank, 10, 2))


@pytest.mark.parametrize(
    ("requirement", "module"),
    [
        ("torch>=0.1", None),
        ("torch>100.0", None),
        ("torch", None),
        ("unknown_package_xyz", None),
        (None, "torch.utils"),
        (None, "unknown.module.path"),
        ("torch>=0.1", "unknown_module_xyz"),
    ],
)
def test_requirement_cache_answers_as_lightnings(requirement: str | None, module: str | None) -> None:
    from lightning_fabric.utilities.imports import RequirementCache as Theirs

    from fabric_core.utilities.imports import RequirementCache

    ours, theirs = RequirementCache(requirement, module), Theirs(requirement, module)
    assert bool(ours) == bool(theirs)
    assert str(ours) == str(theirs)


def test_requirement_cache_needs_an_argument() -> None:
    from fabric_core.utilities.imports import RequirementCache

    with pytest.raises(ValueError, match="needs a requirement"):
        RequirementCache()


def test_compare_version_as_lightnings() -> None:
    from lightning_fabric.utilities.imports import compare_version as theirs

    from fabric_core.utilities.imports import compare_version

    for args in (
        ("torch", operator.ge, "0.1"),
        ("torch", operator.lt, "0.1"),
        ("does_not_exist", operator.ge, "0.0"),
        ("torch", operator.ge, torch.__version__.split("+")[0], True),
    ):
        assert compare_version(*args) == theirs(*args), args
