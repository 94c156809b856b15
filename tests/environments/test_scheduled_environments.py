"""The environments that read their ranks from a scheduler's variables share one table-driven base."""

from __future__ import annotations

import pytest

from fabric_core.environments._scheduled import RankVariables, ScheduledEnvironment, Variable
from fabric_core.environments.kubeflow import KubeflowEnvironment
from fabric_core.environments.lsf import LSFEnvironment
from fabric_core.environments.slurm import SLURMEnvironment
from fabric_core.environments.torchelastic import TorchElasticEnvironment
from fabric_core.errors import InvalidConfigError

SCHEDULED = (SLURMEnvironment, LSFEnvironment, TorchElasticEnvironment, KubeflowEnvironment)
# What the base reads from the table: a subclass that defines one of these again repeats the base.
READ_BY_THE_BASE = (
    "creates_processes_externally",
    "main_address",
    "main_port",
    "world_size",
    "set_world_size",
    "global_rank",
    "set_global_rank",
    "local_rank",
)


@pytest.mark.parametrize("cls", SCHEDULED, ids=lambda c: c.__name__)
def test_each_scheduled_environment_declares_a_table_and_reads_nothing_itself(cls: type) -> None:
    assert issubclass(cls, ScheduledEnvironment)
    assert isinstance(cls.variables, RankVariables)
    assert not set(READ_BY_THE_BASE) & set(vars(cls)), f"{cls.__name__} reads its ranks itself"


def _environment(cls: type[ScheduledEnvironment], tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> object:
    if cls is LSFEnvironment:
        rankfile = tmp_path / "rankfile"  # type: ignore[operator]
        rankfile.write_text("launch\nhost0\nhost0\n")
        monkeypatch.setenv("LSB_DJOB_RANKFILE", str(rankfile))
        monkeypatch.setenv("LSB_JOBID", "1234")
    if cls is SLURMEnvironment:
        monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    return cls()


@pytest.mark.parametrize("cls", SCHEDULED, ids=lambda c: c.__name__)
@pytest.mark.parametrize("field", ["world_size", "global_rank", "local_rank", "node_rank"])
def test_every_declared_variable_is_read_and_validated(
    cls: type[ScheduledEnvironment], field: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = getattr(cls.variables, field)
    environment = _environment(cls, tmp_path, monkeypatch)
    if not isinstance(source, Variable):  # a fixed value (Kubeflow's local rank) or LSF's rank file
        return
    monkeypatch.setenv(source.name, "7")
    assert getattr(environment, field)() == 7
    monkeypatch.setenv(source.name, "seven")
    with pytest.raises(InvalidConfigError, match=f"{source.name}='seven' is not an integer"):
        getattr(environment, field)()


def test_fixed_values_and_shared_variables() -> None:
    assert KubeflowEnvironment.variables.local_rank == 0
    assert KubeflowEnvironment.variables.node_rank == KubeflowEnvironment.variables.global_rank
    assert TorchElasticEnvironment.variables.node_rank == Variable("GROUP_RANK", default=0)


def test_an_exported_address_and_port_win_over_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_NODELIST", "node[3-4]")
    monkeypatch.setenv("SLURM_JOB_ID", "98765")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    environment = SLURMEnvironment()
    assert (environment.main_address, environment.main_port) == ("node3", 15000 + 8765)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.9")
    monkeypatch.setenv("MASTER_PORT", "29999")
    assert (environment.main_address, environment.main_port) == ("10.0.0.9", 29999)
    monkeypatch.setenv("MASTER_PORT", "port")
    with pytest.raises(InvalidConfigError, match="MASTER_PORT='port' is not an integer"):
        _ = environment.main_port


def test_setting_a_schedulers_rank_or_size_is_ignored_with_a_debug_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    environment = TorchElasticEnvironment()
    with caplog.at_level(logging.DEBUG, logger="fabric_core.environments"):
        environment.set_world_size(8)
        environment.set_global_rank(3)
    assert (environment.world_size(), environment.global_rank()) == (4, 1)
    assert "TorchElasticEnvironment.set_world_size was called, but setting world size is not allowed" in caplog.text
    assert "TorchElasticEnvironment.set_global_rank was called, but setting global rank is not allowed" in caplog.text
