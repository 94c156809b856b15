"""The loaders batch_sampler_job.py sets up, shared with the test that computes what each rank should see."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler

SEED = 7
DATASET = list(range(20))


class SubclassBatches(BatchSampler):
    """A user's ``BatchSampler`` subclass."""


class DuckBatches:
    """A batch sampler that is no ``BatchSampler`` but takes the same arguments."""

    def __init__(self, sampler: Sampler[int], batch_size: int, drop_last: bool) -> None:
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.batch_size)  # type: ignore[arg-type]


def loaders() -> dict[str, DataLoader[Any]]:
    """Fresh loaders, one per setup."""
    sequential = SequentialSampler(DATASET)
    shuffled = RandomSampler(DATASET, generator=torch.Generator().manual_seed(1))
    return {
        "subclass": DataLoader(DATASET, batch_sampler=SubclassBatches(sequential, 3, False)),
        "duck": DataLoader(DATASET, batch_sampler=DuckBatches(sequential, 3, False)),  # type: ignore[arg-type]
        "plain": DataLoader(DATASET, batch_sampler=BatchSampler(sequential, 3, True)),
        "plain_shuffled": DataLoader(DATASET, batch_sampler=BatchSampler(shuffled, 3, False)),
    }
