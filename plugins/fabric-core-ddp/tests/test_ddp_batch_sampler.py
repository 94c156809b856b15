"""A loader built on a user's batch sampler, set up under DDP on two real gloo ranks.

Each rank must draw batches of the user's size from its own share of the data, the same batches Lightning
Fabric gives for the same loader (computed here with Lightning's own sampler-injection functions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from fabric_core.testing import run_in_own_session

JOBS = Path(__file__).parent / "_jobs"
sys.path.insert(0, str(JOBS))
from batch_sampler_setups import DATASET, SEED, SubclassBatches, loaders  # noqa: E402

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], str]:
    outdir = tmp_path_factory.mktemp("batch_sampler")
    environ = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE")}
    try:
        result = run_in_own_session(
            [sys.executable, str(JOBS / "batch_sampler_job.py"), str(outdir)], timeout=90, env=environ
        )
    except subprocess.TimeoutExpired as expired:  # pragma: no cover - the failure report
        pytest.fail(f"the job did not finish: {expired.output}")
    assert result.returncode == 0, result.stdout
    return [json.loads((outdir / f"rank{rank}.json").read_text()) for rank in (0, 1)], result.stdout


@pytest.fixture
def drawn(job: tuple[list[dict[str, Any]], str]) -> list[dict[str, Any]]:
    return job[0]


@pytest.mark.timeout(120)
def test_the_ranks_log_lightnings_lines_when_they_join(job: tuple[list[dict[str, Any]], str]) -> None:
    output = job[1]
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in output
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in output
    banner = "distributed_backend=gloo\nAll distributed processes registered. Starting with 2 processes"
    assert output.count(banner) == 1  # rank 0 only


def _lightning_batches(loader: DataLoader[Any], rank: int) -> list[list[int]]:
    lightning_fabric = pytest.importorskip("lightning_fabric")
    from lightning_fabric.utilities.data import _update_dataloader

    sampler = lightning_fabric.Fabric._get_distributed_sampler(loader, num_replicas=2, rank=rank, seed=SEED)
    return [batch.tolist() for batch in _update_dataloader(loader, sampler)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("setup", ["subclass", "duck"])
def test_each_rank_draws_lightnings_batches_from_a_custom_batch_sampler(
    drawn: list[dict[str, Any]], setup: str
) -> None:
    for rank in (0, 1):
        assert drawn[rank][setup] == _lightning_batches(loaders()[setup], rank)
    assert drawn[0][setup][0] == [0, 2, 4]


@pytest.mark.timeout(120)
def test_a_plain_batch_sampler_keeps_its_batch_size_on_each_rank(drawn: list[dict[str, Any]]) -> None:
    # Lightning crashes in collate here (or, inside `launch(fn)`, draws batches of one); the batches are
    # those it draws for the same sampler in a BatchSampler subclass.
    for rank in (0, 1):
        like = DataLoader(DATASET, batch_sampler=SubclassBatches(loaders()["plain"].batch_sampler.sampler, 3, True))
        assert drawn[rank]["plain"] == _lightning_batches(like, rank)
        assert all(len(batch) == 3 for batch in drawn[rank]["plain"])


@pytest.mark.timeout(120)
def test_a_shuffling_batch_sampler_stays_shuffled_and_split(drawn: list[dict[str, Any]]) -> None:
    # Deliberate difference: Lightning splits the loader's default sequential sampler and so loses the
    # shuffle; the split here shuffles with the seed `seed_everything` set, alike on every rank.
    for rank in (0, 1):
        split = DistributedSampler(DATASET, num_replicas=2, rank=rank, shuffle=True, seed=SEED)
        assert drawn[rank]["plain_shuffled"] == list(BatchSampler(split, 3, False))
    flat = [i for rank in (0, 1) for batch in drawn[rank]["plain_shuffled"] for i in batch]
    assert sorted(flat) == DATASET
    assert flat[:10] != sorted(flat[:10])
