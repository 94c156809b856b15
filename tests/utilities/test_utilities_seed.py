"""seed_everything, reset_seed, set_seed and the per-worker seeds of fabric_core.utilities.seed."""

from __future__ import annotations

import json
import logging
import os
import random
import sys
from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fabric_core.errors import InvalidConfigError
from fabric_core.testing import run_in_own_session
from fabric_core.utilities.seed import (
    reset_seed,
    seed_everything,
    seed_workers_enabled,
    set_seed,
    worker_init_function,
)

_SEED_VARS = (
    "FABRIC_CORE_GLOBAL_SEED",
    "PL_GLOBAL_SEED",
    "FABRIC_CORE_SEED_WORKERS",
    "PL_SEED_WORKERS",
)


@pytest.fixture(autouse=True)
def _no_seed_in_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # setenv first so that monkeypatch restores the variables that the code under test writes.
    for name in _SEED_VARS:
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic)


def _draws() -> tuple[list[float], float, list[float]]:
    return torch.rand(3).tolist(), random.random(), np.random.rand(3).tolist()


def test_seed_everything_returns_the_seed_and_records_it_in_lightnings_variables_only() -> None:
    before = dict(os.environ)
    assert seed_everything(123) == 123
    added = {name: value for name, value in os.environ.items() if before.get(name) != value}
    assert added == {"PL_GLOBAL_SEED": "123", "PL_SEED_WORKERS": "0"}


def test_seed_everything_makes_torch_random_and_numpy_repeatable() -> None:
    seed_everything(7)
    first = _draws()
    seed_everything(7)
    assert _draws() == first
    seed_everything(8)
    assert _draws() != first


def test_seed_everything_falls_back_to_its_own_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_CORE_GLOBAL_SEED", "31")
    assert seed_everything() == 31
    assert os.environ["PL_GLOBAL_SEED"] == "31"
    assert os.environ["FABRIC_CORE_GLOBAL_SEED"] == "31"  # read, never written


def test_lightnings_variable_wins_over_our_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_CORE_GLOBAL_SEED", "31")
    monkeypatch.setenv("PL_GLOBAL_SEED", "99")
    assert seed_everything() == 99
    # Once seed_everything has recorded a seed, our variable no longer decides: Lightning's holds the record.
    seed_everything(42)
    assert seed_everything() == 42


def test_a_newer_lightning_seed_wins_over_the_one_seed_everything_wrote() -> None:
    # A launcher or the user sets Lightning's variable for the next run after a seed_everything(42).
    seed_everything(42)
    os.environ["PL_GLOBAL_SEED"] = "123"
    assert seed_everything() == 123


def test_reset_seed_applies_a_newer_lightning_seed() -> None:
    seed_everything(42)
    os.environ["PL_GLOBAL_SEED"] = "5"
    reset_seed()
    first = _draws()
    seed_everything(5)
    assert _draws() == first


def test_seed_everything_reads_lightnings_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_GLOBAL_SEED", "99")
    assert seed_everything() == 99
    assert "FABRIC_CORE_GLOBAL_SEED" not in os.environ


def test_seed_everything_without_any_seed_warns_and_uses_zero() -> None:
    with pytest.warns(UserWarning, match="No seed found, seed set to 0"):
        assert seed_everything() == 0


@pytest.mark.parametrize("name", ["PL_GLOBAL_SEED", "FABRIC_CORE_GLOBAL_SEED"])
def test_seed_everything_rejects_a_non_integer_environment(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "forty-two")
    message = rf"^Invalid seed specified via {name}: 'forty-two'; it must be an integer from 0 to 4294967295"
    with pytest.raises(ValueError, match=message):
        seed_everything()


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_seed_everything_rejects_out_of_bounds_seeds(seed: int) -> None:
    with pytest.raises(InvalidConfigError, match=rf"^{seed} is not in bounds, numpy accepts from 0 to 4294967295$"):
        seed_everything(seed)


def test_seed_everything_accepts_the_bounds() -> None:
    assert seed_everything(0) == 0
    assert seed_everything(2**32 - 1) == 2**32 - 1


def test_seed_everything_casts_a_string_seed() -> None:
    assert seed_everything("5") == 5  # type: ignore[arg-type]


def test_seed_everything_records_worker_seeding() -> None:
    assert not seed_workers_enabled()
    seed_everything(1, workers=True)
    assert os.environ["PL_SEED_WORKERS"] == "1"
    assert "FABRIC_CORE_SEED_WORKERS" not in os.environ
    assert seed_workers_enabled()
    seed_everything(1)
    assert not seed_workers_enabled()


def test_seed_workers_enabled_reads_lightnings_variable_then_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_CORE_SEED_WORKERS", "1")
    assert seed_workers_enabled()
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    assert not seed_workers_enabled()
    monkeypatch.setenv("PL_SEED_WORKERS", "1")
    assert seed_workers_enabled()


def test_seed_everything_logs_the_seed_when_verbose(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    with caplog.at_level(logging.INFO, logger="fabric_core.utilities.seed"):
        seed_everything(11)
        seed_everything(12, verbose=False)
        monkeypatch.setenv("RANK", "1")  # prefixed with the rank where a launcher announced one, as in Lightning
        seed_everything(13)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["Seed set to 11", "[rank: 1] Seed set to 13"]


def test_reset_seed_reapplies_the_recorded_seed() -> None:
    seed_everything(21, workers=True)
    first = _draws()
    _draws()
    os.environ["PL_SEED_WORKERS"] = "0"
    reset_seed()
    assert _draws() == first


def test_reset_seed_keeps_worker_seeding() -> None:
    seed_everything(21, workers=True)
    reset_seed()
    assert seed_workers_enabled()


def test_reset_seed_honours_lightnings_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    seed_everything(5)
    expected = _draws()
    seed_everything(6)
    monkeypatch.setenv("PL_GLOBAL_SEED", "5")
    reset_seed()
    assert _draws() == expected


_CHILD = """
import json, torch
from fabric_core.utilities.seed import reset_seed, seed_workers_enabled
reset_seed()
print(json.dumps([torch.rand(3).tolist(), seed_workers_enabled()]))
"""


@pytest.mark.timeout(120)
def test_reset_seed_in_a_started_process_applies_the_parents_seed() -> None:
    seed_everything(21, workers=True)
    expected = torch.rand(3).tolist()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_")}
    child = run_in_own_session([sys.executable, "-c", _CHILD], timeout=90, env=env)
    assert child.returncode == 0, child.stdout
    assert json.loads(child.stdout.strip().splitlines()[-1]) == [expected, True]


def test_reset_seed_without_a_recorded_seed_leaves_the_generators_alone() -> None:
    torch.manual_seed(3)
    state = torch.get_rng_state()
    reset_seed()
    assert torch.equal(torch.get_rng_state(), state)
    assert "PL_GLOBAL_SEED" not in os.environ


def _worker_draws(base_seed: int, worker_id: int, rank: int | None) -> tuple[list[float], float, list[float]]:
    # DataLoader seeds worker ``i`` of a loader with ``base_seed + i`` before calling worker_init_fn.
    torch.manual_seed(base_seed + worker_id)
    worker_init_function(worker_id, rank=rank)
    return _draws()


def test_worker_init_function_is_deterministic() -> None:
    assert _worker_draws(1000, 1, 0) == _worker_draws(1000, 1, 0)


def test_worker_init_function_differs_per_worker_and_rank() -> None:
    draws = {(worker, rank): _worker_draws(1000, worker, rank) for worker in range(2) for rank in range(2)}
    for generator in range(3):  # torch, random and numpy are each distinct
        values = [repr(d[generator]) for d in draws.values()]
        assert len(set(values)) == len(values)


def test_worker_init_function_follows_the_loaders_base_seed() -> None:
    assert _worker_draws(1000, 0, 0) != _worker_draws(2000, 0, 0)


def test_worker_init_function_overrides_torchs_default_seed() -> None:
    torch.manual_seed(1000)
    default = torch.rand(3).tolist()
    assert _worker_draws(1000, 0, 0)[0] != default


def test_worker_init_function_reads_the_rank_of_rank_zero_only() -> None:
    from fabric_core.utilities.rank_zero import rank_zero_only

    rank_zero_only.rank = 1
    assert _worker_draws(1000, 0, 1) == _worker_draws(1000, 0, rank=None)


class _NumpyDraws(Dataset[float]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> float:
        return float(np.random.rand())


@pytest.mark.timeout(60)
def test_worker_init_function_gives_real_workers_distinct_numpy_streams() -> None:
    def draws() -> list[float]:
        generator = torch.Generator().manual_seed(0)
        loader = DataLoader(
            _NumpyDraws(),
            batch_size=2,
            num_workers=2,
            worker_init_fn=partial(worker_init_function, rank=0),
            generator=generator,
            multiprocessing_context="fork",
        )
        return [x for batch in loader for x in batch.tolist()]

    first = draws()
    assert len(set(first)) == 4  # numpy is seeded per worker, not copied from the parent
    assert draws() == first


def test_set_seed_makes_draws_repeatable() -> None:
    set_seed(17)
    first = _draws()
    set_seed(17)
    assert _draws() == first


def test_set_seed_records_nothing() -> None:
    set_seed(17)
    assert "FABRIC_CORE_GLOBAL_SEED" not in os.environ


def test_set_seed_device_specific_in_one_process_is_rank_zero() -> None:
    set_seed(17, device_specific=True)
    first = _draws()
    set_seed(17)
    assert _draws() == first


def test_set_seed_deterministic_turns_on_deterministic_algorithms() -> None:
    torch.use_deterministic_algorithms(False)
    set_seed(1, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()


def test_set_seed_rejects_out_of_bounds_seeds() -> None:
    with pytest.raises(ValueError, match="is not in bounds"):
        set_seed(2**32)


def test_recorded_seed() -> None:
    from fabric_core.utilities.seed import recorded_seed

    assert recorded_seed() is None
    seed_everything(9)
    assert recorded_seed() == 9


def test_seed_everything_without_any_seed_is_quiet_when_not_verbose(recwarn: pytest.WarningsRecorder) -> None:
    assert seed_everything(verbose=False) == 0
    assert not [w for w in recwarn if "No seed found" in str(w.message)]


def test_the_worker_seed_sequence_takes_lightnings_keywords_and_values() -> None:
    lightning_seed = pytest.importorskip("lightning_fabric.utilities.seed")
    from fabric_core.utilities import seed as ours

    for base_seed in (0, 42, 2**40 + 7):
        expected = lightning_seed._generate_seed_sequence(base_seed, worker_id=3, global_rank=1, count=4)
        assert ours._generate_seed_sequence(base_seed, worker_id=3, global_rank=1, count=4) == expected
