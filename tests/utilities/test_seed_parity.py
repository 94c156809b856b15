"""Seeded DataLoader workers draw the same numbers under fabric-core as under Lightning Fabric, bitwise.

The same loader is set up by each library's ``Fabric`` after each library's
``seed_everything(42, workers=True)``; two real worker processes draw from torch, numpy and ``random``.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

_SEED_VARS = ("FABRIC_CORE_GLOBAL_SEED", "PL_GLOBAL_SEED", "FABRIC_CORE_SEED_WORKERS", "PL_SEED_WORKERS")


@pytest.fixture(autouse=True)
def _no_seed_in_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _SEED_VARS:
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    yield


class _Draws(Dataset[torch.Tensor]):
    """Each item is what the worker's three generators give next."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        draws = [float(index), torch.rand(()).item(), float(np.random.rand()), random.random()]
        return torch.tensor(draws, dtype=torch.float64)


def _worker_draws(fabric_cls: Any, seed_everything: Any, rank: int | None = None) -> list[list[float]]:
    fabric = fabric_cls(accelerator="cpu", devices=1)
    seed_everything(42, workers=True)
    loader = fabric.setup_dataloaders(DataLoader(_Draws(), batch_size=2, num_workers=2), move_to_device=False)
    if rank is not None:
        loader.worker_init_fn.keywords["rank"] = rank
    return [row for batch in loader for row in batch.tolist()]


def _both(rank: int | None = None) -> tuple[list[list[float]], list[list[float]]]:
    lightning_fabric = pytest.importorskip("lightning_fabric")
    import fabric_core
    from fabric_core.utilities.seed import seed_everything

    ours = _worker_draws(fabric_core.Fabric, seed_everything, rank)
    theirs = _worker_draws(lightning_fabric.Fabric, lightning_fabric.seed_everything, rank)
    return ours, theirs


@pytest.mark.timeout(60)
def test_seeded_workers_draw_lightnings_numbers() -> None:
    ours, theirs = _both()
    assert ours == theirs
    # Two workers, four generators: the rows really differ (no worker repeats another's stream).
    assert len({tuple(row[1:]) for row in ours}) == 8


@pytest.mark.timeout(60)
def test_seeded_workers_of_another_rank_draw_lightnings_numbers() -> None:
    ours, theirs = _both(rank=3)
    assert ours == theirs
    assert ours != _both()[0]


# Each package seeds in a fresh interpreter and reports, per call, what seeding added to or changed in os.environ
# (the environment is put back between calls, so each starts from the same one). One interpreter per package
# for all the calls: importing Lightning is most of the cost.
_ENV_SCRIPT = """
import importlib, json, os, sys, warnings
warnings.simplefilter("ignore")
package, calls = sys.argv[1], json.loads(sys.argv[2])
seed_everything = importlib.import_module(package).seed_everything
before = dict(os.environ)
added = []
for call in calls:
    eval(call, {"seed_everything": seed_everything})
    added.append({k: v for k, v in os.environ.items() if before.get(k) != v})
    os.environ.clear()
    os.environ.update(before)
print(json.dumps(added))
"""

_SEED_CALLS = {
    "seed_everything(42)": {"PL_GLOBAL_SEED": "42", "PL_SEED_WORKERS": "0"},
    "seed_everything(42, workers=True)": {"PL_GLOBAL_SEED": "42", "PL_SEED_WORKERS": "1"},
    "seed_everything()": {"PL_GLOBAL_SEED": "0", "PL_SEED_WORKERS": "0"},
}


def _environment_added(package: str, calls: list[str]) -> list[dict[str, str]]:
    from fabric_core.testing import run_in_own_session

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PL_", "FABRIC_CORE_"))}
    done = run_in_own_session([sys.executable, "-c", _ENV_SCRIPT, package, json.dumps(calls)], timeout=120, env=env)
    assert done.returncode == 0, f"{package}: {calls} failed:\n{done.stdout[-2000:]}"
    added: list[dict[str, str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return added


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parity
def test_seed_everything_leaves_lightnings_environment() -> None:
    pytest.importorskip("lightning_fabric")
    calls = list(_SEED_CALLS)
    with ThreadPoolExecutor(2) as pool:
        theirs, ours = pool.map(lambda package: _environment_added(package, calls), ("lightning_fabric", "fabric_core"))
    for call, their_env, our_env in zip(calls, theirs, ours):
        assert their_env == _SEED_CALLS[call], call  # against what Lightning really does, not an empty dict
        assert our_env == their_env, call
