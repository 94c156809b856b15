"""DistributedSamplerWrapper, distributed samplers for loaders, and re-creating loaders with a new sampler."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.data import (
    DistributedSamplerWrapper,
    distributed_sampler_for,
    has_iterable_dataset,
    has_len,
    replace_sampler,
    requires_distributed_sampler,
    suggested_max_num_workers,
)


class _FixedOrder(Sampler[int]):
    """Yields a fixed order; counts its passes and remembers the epoch it was given."""

    def __init__(self, order: list[int]) -> None:
        self.order = order
        self.passes = 0
        self.epoch: int | None = None

    def __iter__(self) -> Iterator[int]:
        self.passes += 1
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class _Unsized(Sampler[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


class _Stream(IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(4))


_ORDER = [9, 7, 5, 3, 1, 8, 6, 4, 2, 0]


def _ds(n: int) -> Any:
    """A map-style dataset of ``n`` integers (a list; typed loosely because torch's stubs want a Dataset)."""
    return list(range(n))


def _ranks(sampler: Sampler[int], **kwargs: Any) -> list[list[int]]:
    return [list(DistributedSamplerWrapper(sampler, num_replicas=2, rank=r, **kwargs)) for r in range(2)]


# -- DistributedSamplerWrapper ---------------------------------------------------------------------------
def test_wrapper_splits_the_samplers_order_between_ranks() -> None:
    assert _ranks(_FixedOrder(_ORDER), shuffle=False) == [[9, 5, 1, 6, 2], [7, 3, 8, 4, 0]]


def test_wrapper_shuffled_shares_are_disjoint_and_complete() -> None:
    first, second = _ranks(_FixedOrder(_ORDER), shuffle=True, seed=3)
    assert not set(first) & set(second)
    assert sorted(first + second) == _ds(10)
    assert first + second != [9, 5, 1, 6, 2, 7, 3, 8, 4, 0]


def test_wrapper_has_the_length_of_one_share() -> None:
    wrapper = DistributedSamplerWrapper(_FixedOrder(_ORDER[:9]), num_replicas=2, rank=0)
    assert len(wrapper) == 5


def test_wrapper_draws_the_sampler_again_each_pass() -> None:
    inner = _FixedOrder(_ORDER)
    wrapper = DistributedSamplerWrapper(inner, num_replicas=2, rank=0, shuffle=False)
    list(wrapper)
    list(wrapper)
    assert inner.passes == 2


def test_wrapper_follows_a_reshuffling_sampler() -> None:
    inner = RandomSampler(range(10), generator=torch.Generator().manual_seed(0))
    wrapper = DistributedSamplerWrapper(inner, num_replicas=1, rank=0, shuffle=False)
    assert list(wrapper) != list(wrapper)


def test_wrapper_set_epoch_reaches_the_wrapped_sampler() -> None:
    inner = _FixedOrder(_ORDER)
    wrapper = DistributedSamplerWrapper(inner, num_replicas=2, rank=0, shuffle=True)
    before = list(wrapper)
    wrapper.set_epoch(4)
    assert inner.epoch == 4
    assert wrapper.epoch == 4
    assert list(wrapper) != before


def test_wrapper_exposes_the_wrapped_sampler() -> None:
    inner = _FixedOrder(_ORDER)
    assert DistributedSamplerWrapper(inner, num_replicas=2, rank=0).sampler is inner


def test_wrapper_rejects_a_sampler_without_length() -> None:
    with pytest.raises(InvalidConfigError, match="needs a sampler with a length; _Unsized has none"):
        DistributedSamplerWrapper(_Unsized(), num_replicas=2, rank=0)


# -- small helpers ---------------------------------------------------------------------------------------
def test_suggested_max_num_workers_leaves_one_cpu_per_process() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert suggested_max_num_workers(1) == max(1, cpus - 1)
    assert suggested_max_num_workers(cpus * 4) == 1


@pytest.mark.parametrize("local_world_size", [0, -2])
def test_suggested_max_num_workers_rejects_fewer_than_one_process(local_world_size: int) -> None:
    with pytest.raises(ValueError, match=rf"`local_world_size` should be >= 1, got {local_world_size}"):
        suggested_max_num_workers(local_world_size)


def test_has_len_of_a_map_style_loader() -> None:
    assert has_len(DataLoader(_ds(4)))


def test_has_len_of_an_iterable_without_length() -> None:
    assert not has_len(DataLoader(_Stream()))
    assert not has_len(iter([1, 2]))


def test_has_len_warns_about_an_empty_loader() -> None:
    with pytest.warns(UserWarning, match="returned 0 length"):
        assert has_len(DataLoader(_ds(0)))


def test_has_iterable_dataset() -> None:
    assert has_iterable_dataset(DataLoader(_Stream()))
    assert not has_iterable_dataset(DataLoader(_ds(3)))


def test_requires_distributed_sampler() -> None:
    data = _ds(4)
    assert requires_distributed_sampler(DataLoader(data))
    assert requires_distributed_sampler(DataLoader(data, shuffle=True))
    assert not requires_distributed_sampler(DataLoader(_Stream()))
    assert not requires_distributed_sampler(DataLoader(data, sampler=DistributedSampler(data, 2, 0)))


# -- distributed_sampler_for -----------------------------------------------------------------------------
def test_distributed_sampler_for_a_sequential_loader() -> None:
    sampler = distributed_sampler_for(DataLoader(_ds(4)), num_replicas=2, rank=1)
    assert type(sampler) is DistributedSampler
    assert not sampler.shuffle
    assert list(sampler) == [1, 3]


def test_distributed_sampler_for_a_shuffled_loader_uses_the_recorded_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PL_GLOBAL_SEED", "42")  # what seed_everything(42) records (an earlier test may have seeded)
    sampler = distributed_sampler_for(DataLoader(_ds(4), shuffle=True), num_replicas=2, rank=0)
    assert type(sampler) is DistributedSampler
    assert sampler.shuffle
    assert sampler.seed == 42


def test_distributed_sampler_for_a_custom_sampler_wraps_it() -> None:
    inner = _FixedOrder(_ORDER)
    sampler = distributed_sampler_for(DataLoader(_ds(10), sampler=inner), num_replicas=2, rank=0)
    assert isinstance(sampler, DistributedSamplerWrapper)
    assert sampler.sampler is inner
    assert not sampler.shuffle


def test_distributed_sampler_for_keeps_explicit_arguments() -> None:
    sampler = distributed_sampler_for(DataLoader(_ds(4), shuffle=True), num_replicas=2, rank=0, shuffle=False)
    assert not sampler.shuffle


def test_distributed_sampler_for_a_custom_batch_sampler_splits_its_sampler() -> None:
    inner = _FixedOrder(_ORDER)
    loader = DataLoader(_ds(10), batch_sampler=_EvenBatches(inner, batch_size=2, drop_last=False))
    sampler = distributed_sampler_for(loader, num_replicas=2, rank=0)
    assert isinstance(sampler, DistributedSamplerWrapper)
    assert sampler.sampler is inner


# -- replace_sampler -------------------------------------------------------------------------------------
def _collate(batch: list[int]) -> list[int]:
    return batch


def _init_worker(worker_id: int) -> None:
    pass


def test_replace_sampler_carries_every_other_argument() -> None:
    generator = torch.Generator()
    loader = DataLoader(
        _ds(10),
        batch_size=3,
        collate_fn=_collate,
        drop_last=True,
        timeout=5.0,
        worker_init_fn=_init_worker,
        generator=generator,
        num_workers=2,
        prefetch_factor=4,
        persistent_workers=True,
        multiprocessing_context="spawn",
    )
    sampler = _FixedOrder(_ORDER)
    new = replace_sampler(loader, sampler)
    assert new is not loader
    assert new.sampler is sampler
    assert new.dataset is loader.dataset
    assert (new.batch_size, new.drop_last, new.timeout) == (3, True, 5.0)
    assert new.collate_fn is _collate
    assert new.worker_init_fn is _init_worker
    assert new.generator is generator
    assert (new.num_workers, new.prefetch_factor, new.persistent_workers) == (2, 4, True)
    assert new.multiprocessing_context is loader.multiprocessing_context


def test_replace_sampler_loader_draws_from_the_new_sampler() -> None:
    loader = DataLoader(_ds(10), batch_size=4, shuffle=True, collate_fn=_collate)
    new = replace_sampler(loader, _FixedOrder(_ORDER))
    assert list(new) == [[9, 7, 5, 3], [1, 8, 6, 4], [2, 0]]
    assert isinstance(loader.sampler, RandomSampler)  # the original is untouched


def test_replace_sampler_without_automatic_batching() -> None:
    loader = DataLoader(_ds(4), batch_size=None)
    new = replace_sampler(loader, _FixedOrder([3, 2, 1, 0]))
    assert new.batch_size is None
    assert [int(x) for x in new] == [3, 2, 1, 0]


def test_replace_sampler_applies_overrides() -> None:
    new = replace_sampler(DataLoader(_ds(4)), SequentialSampler(range(4)), worker_init_fn=_init_worker)
    assert new.worker_init_fn is _init_worker


class _EvenBatches(BatchSampler):
    """A custom batch sampler: keeps only batches whose first index is even."""

    def __iter__(self) -> Iterator[list[int]]:
        return (b for b in super().__iter__() if b[0] % 2 == 0)


def test_replace_sampler_recreates_a_custom_batch_sampler() -> None:
    loader = DataLoader(_ds(10), batch_sampler=_EvenBatches(SequentialSampler(range(10)), 2, False))
    new = replace_sampler(loader, _FixedOrder(_ORDER), collate_fn=_collate)
    assert type(new.batch_sampler) is _EvenBatches
    assert isinstance(new.batch_sampler, _EvenBatches)
    assert isinstance(new.batch_sampler.sampler, _FixedOrder)
    assert new.batch_sampler.sampler.order == _ORDER
    assert list(new) == [[6, 4], [2, 0]]


def test_replace_sampler_keeps_the_size_of_a_plain_batch_sampler_the_user_passed() -> None:
    loader = DataLoader(_ds(10), batch_sampler=BatchSampler(SequentialSampler(range(10)), 3, True))
    new = replace_sampler(loader, _FixedOrder(_ORDER))
    assert (new.batch_size, new.drop_last) == (3, True)
    assert [b.tolist() for b in new] == [[9, 7, 5], [3, 1, 8], [6, 4, 2]]


def test_distributed_sampler_for_a_plain_batch_sampler_splits_its_sampler() -> None:
    inner = RandomSampler(range(10))
    loader = DataLoader(_ds(10), batch_sampler=BatchSampler(inner, 2, False))
    sampler = distributed_sampler_for(loader, num_replicas=2, rank=0)
    assert type(sampler) is DistributedSampler
    assert sampler.shuffle


class _Chunks:
    """A batch sampler that is not a BatchSampler and cannot be re-created around another sampler."""

    def __iter__(self) -> Iterator[list[int]]:
        return iter([[0, 1], [2, 3]])

    def __len__(self) -> int:
        return 2


def test_replace_sampler_refuses_a_batch_sampler_it_cannot_recreate() -> None:
    loader = DataLoader(_ds(4), batch_sampler=_Chunks())
    with pytest.raises(InvalidConfigError, match=r"Cannot put a new sampler into the batch sampler _Chunks"):
        replace_sampler(loader, SequentialSampler(range(4)))


def test_replace_sampler_refuses_an_iterable_dataset() -> None:
    with pytest.raises(InvalidConfigError, match=r"over an `IterableDataset` \(_Stream\)"):
        replace_sampler(DataLoader(_Stream()), SequentialSampler(range(4)))


class _TaggedLoader(DataLoader[Any]):
    def __init__(self, dataset: Any, tag: str, batch_size: int = 1, **kwargs: Any) -> None:
        super().__init__(dataset, batch_size=batch_size, **kwargs)
        self.tag = tag


def test_replace_sampler_recreates_a_subclass_from_its_attributes() -> None:
    loader = _TaggedLoader(_ds(6), "train", batch_size=2, drop_last=True, collate_fn=_collate)
    new = replace_sampler(loader, _FixedOrder([5, 4, 3, 2, 1]))
    assert type(new) is _TaggedLoader
    assert new.tag == "train"
    assert (new.batch_size, new.drop_last) == (2, True)
    assert list(new) == [[5, 4], [3, 2]]


class _ForgetfulLoader(DataLoader[Any]):
    def __init__(self, dataset: Any, secret: int) -> None:
        super().__init__(dataset)


def test_replace_sampler_names_constructor_arguments_it_cannot_read() -> None:
    with pytest.raises(InvalidConfigError, match=r"requires 'secret', which the loader does not keep"):
        replace_sampler(_ForgetfulLoader(_ds(3), 1), SequentialSampler(range(3)))


def test_replace_sampler_with_a_distributed_sampler_splits_the_batches() -> None:
    loader = DataLoader(_ds(8), batch_size=2, collate_fn=_collate)
    shares = [list(replace_sampler(loader, distributed_sampler_for(loader, num_replicas=2, rank=r))) for r in (0, 1)]
    assert shares == [[[0, 2], [4, 6]], [[1, 3], [5, 7]]]


def test_distributed_sampler_for_reads_lightnings_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")
    monkeypatch.setenv("FABRIC_CORE_GLOBAL_SEED", "0")
    monkeypatch.delenv("FABRIC_CORE_GLOBAL_SEED")
    assert distributed_sampler_for(DataLoader(_ds(4), shuffle=True), num_replicas=2, rank=0).seed == 7
