"""rank_zero_only and the rank-zero logging/warning helpers."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fabric_core.errors import FabricCoreWarning, InvalidConfigError
from fabric_core.utilities.rank_zero import (
    RANK_ENV_VARS,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _env_decides_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in RANK_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    rank_zero_only.reset()
    yield
    rank_zero_only.reset()


def _calls() -> tuple[list[int], Callable[[int], int | None]]:
    seen: list[int] = []

    @rank_zero_only
    def record(value: int) -> int:
        seen.append(value)
        return value * 2

    return seen, record


def test_runs_on_rank_zero_and_returns_the_result() -> None:
    seen, record = _calls()
    assert record(3) == 6
    assert seen == [3]


def test_skipped_on_other_ranks_and_returns_none() -> None:
    seen, record = _calls()
    rank_zero_only.rank = 1
    assert record(3) is None
    assert seen == []


def test_default_is_returned_on_other_ranks() -> None:
    def answer() -> str:
        return "computed"

    guarded = rank_zero_only(answer, default="skipped")
    rank_zero_only.rank = 2
    assert guarded() == "skipped"
    rank_zero_only.rank = 0
    assert guarded() == "computed"


def test_wrapper_keeps_name_and_docstring() -> None:
    @rank_zero_only
    def documented() -> None:
        """The docstring."""

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "The docstring."


def test_rank_defaults_to_zero_without_environment() -> None:
    assert rank_zero_only.rank == 0


@pytest.mark.parametrize("variable", RANK_ENV_VARS)
def test_rank_is_read_from_each_environment_variable(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "3")
    assert rank_zero_only.rank == 3
    seen, record = _calls()
    record(1)
    assert seen == []


def test_rank_follows_the_environment_as_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Set, emptied, removed and set again between calls: each call sees the environment as it is then.
    seen = []
    for value in ("2", "", None, "1"):
        if value is None:
            monkeypatch.delenv("SLURM_PROCID")
        else:
            monkeypatch.setenv("SLURM_PROCID", value)
        seen.append(rank_zero_only.rank)
    assert seen == [2, 0, 0, 1]


def test_rank_is_read_from_an_environment_mapping_that_is_not_the_process_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test harness may swap `os.environ` for a plain dict: the rank is still read from what it holds.
    monkeypatch.setattr(os, "environ", {"JSM_NAMESPACE_RANK": "4"})
    assert rank_zero_only.rank == 4
    monkeypatch.setattr(os, "environ", {})
    assert rank_zero_only.rank == 0


def test_rank_wins_over_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "5")
    assert rank_zero_only.rank == 5


def test_environment_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, record = _calls()
    monkeypatch.setenv("RANK", "1")
    record(1)
    monkeypatch.setenv("RANK", "0")
    record(2)
    assert seen == [2]


def test_assigned_rank_wins_over_environment_until_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "4")
    rank_zero_only.rank = 0
    assert rank_zero_only.rank == 0
    rank_zero_only.reset()
    assert rank_zero_only.rank == 4


def test_invalid_environment_rank_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_PROCID", "abc")
    with pytest.raises(InvalidConfigError, match=r"SLURM_PROCID='abc'"):
        _ = rank_zero_only.rank


@pytest.mark.parametrize("bad", [-1, "1", 1.0, True])
def test_invalid_assigned_rank_is_rejected(bad: object) -> None:
    with pytest.raises(InvalidConfigError, match="not a valid rank"):
        rank_zero_only.rank = bad  # type: ignore[assignment]


def test_warn_on_rank_zero_points_at_the_caller() -> None:
    with pytest.warns(FabricCoreWarning, match="careful") as record:
        rank_zero_warn("careful")
    assert record[0].filename == __file__


def test_warn_accepts_a_category() -> None:
    with pytest.warns(RuntimeWarning, match="odd"):
        rank_zero_warn("odd", category=RuntimeWarning)


def test_warn_is_silent_on_other_ranks() -> None:
    rank_zero_only.rank = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rank_zero_warn("never")
        rank_zero_deprecation("never")


def _deprecated_api() -> None:
    rank_zero_deprecation("`old()` is deprecated, use `new()`")


def test_deprecation_points_at_the_caller_of_the_deprecated_api() -> None:
    with pytest.warns(DeprecationWarning, match="use `new") as record:
        _deprecated_api()
    assert record[0].filename == __file__
    assert record[0].lineno == test_deprecation_points_at_the_caller_of_the_deprecated_api.__code__.co_firstlineno + 2


def test_info_logs_on_rank_zero_with_the_callers_location(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fabric_core"):
        rank_zero_info("hello %s", "world")
    assert [r.getMessage() for r in caplog.records] == ["hello world"]
    assert caplog.records[0].pathname == __file__
    assert caplog.records[0].levelno == logging.INFO


def test_debug_logs_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="fabric_core"):
        rank_zero_debug("details")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.DEBUG, "details")]


def test_logging_is_silent_on_other_ranks(caplog: pytest.LogCaptureFixture) -> None:
    rank_zero_only.rank = 3
    with caplog.at_level(logging.DEBUG, logger="fabric_core"):
        rank_zero_info("no")
        rank_zero_debug("no")
    assert caplog.records == []


def test_rank_prefixed_message() -> None:
    assert rank_prefixed_message("ready", 2) == "[rank: 2] ready"
    assert rank_prefixed_message("ready", 0) == "[rank: 0] ready"
    assert rank_prefixed_message("ready", None) == "ready"


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_only_the_process_with_rank_zero_writes(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from fabric_core.utilities.rank_zero import rank_zero_only\n"
        "@rank_zero_only\n"
        "def write(path):\n"
        "    open(path, 'w').write('x')\n"
        "write(sys.argv[1])\n"
    )
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items() if k not in RANK_ENV_VARS}
        env["RANK"] = str(rank)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        out = tmp_path / f"rank{rank}.txt"
        procs.append(subprocess.Popen([sys.executable, "-c", code, str(out)], env=env))
    assert [p.wait(timeout=50) for p in procs] == [0, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.txt"]
