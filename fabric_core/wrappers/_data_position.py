"""The position of a ``FabricDataLoader`` in its data: what its state holds and how a resume skips batches.

A resumed epoch must draw the same order as the interrupted one did. The order comes from the sampler: a
``DistributedSampler`` from its ``seed`` and ``epoch``; a ``RandomSampler`` from its generator, or, without
one, from a seed it draws from torch's global generator when the epoch starts. So the loader records, when
an epoch starts, the state of torch's global generator and of every ``torch.Generator`` the loader and its
samplers hold, and a resume puts them back just for the draws that start the epoch (the global generator is
then set back to the state the run checkpoint restored, so the training's own draws are unchanged).

The batches already yielded are skipped as *indices*: the loader's index sampler (its batch sampler, or its
sampler without automatic batching) is wrapped, once, by :class:`SkipFirst`, which drops the first ``k``
index batches of the next epoch before the dataset is asked for anything. A loader with no index sampler
(over an ``IterableDataset``) has no indices to drop: its first ``k`` batches are loaded and dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from fabric_core.utilities.data import sized_len as sized_length

__all__ = [
    "EpochStart",
    "SkipFirst",
    "epoch_generators",
    "install_skipper",
    "reuses_workers",
    "sampler_state",
    "sized_length",
]

_NO_ITEM = object()


class SkipFirst:
    """An index sampler that, on its next pass only, drops its first :attr:`skip` items without yielding them.

    Before that pass draws anything it calls :attr:`replay` (which puts back the generator states the
    epoch's order is drawn from and returns the call that undoes it), and after the first item it keeps (or
    at the end of the pass) it calls what ``replay`` returned: the draws that decide the order are done by
    then. Everything else is read from the wrapped sampler.

    Args:
        inner: The index sampler to wrap (a batch sampler or a sampler).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.skip = 0
        self.replay: Callable[[], Callable[[], None]] | None = None

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this object lacks: ``sampler``, ``batch_size``, ``drop_last``, ``set_epoch``...
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Any]:
        skip, replay = self.skip, self.replay
        self.skip, self.replay = 0, None
        restore = replay() if replay is not None else None
        iterator = iter(self.inner)
        try:
            first = next(islice(iterator, skip, None), _NO_ITEM)
        finally:
            if restore is not None:
                restore()
        if first is _NO_ITEM:
            return
        yield first
        yield from iterator


def install_skipper(dataloader: DataLoader[Any]) -> SkipFirst | None:
    """Wrap the loader's index sampler in a :class:`SkipFirst` (once); ``None`` where it has none.

    ``DataLoader`` refuses to have its samplers set after construction, so the attribute is written
    directly; a live iterator (kept by ``persistent_workers``) holds the old sampler and is dropped.
    """
    name = "batch_sampler" if getattr(dataloader, "batch_sampler", None) is not None else "sampler"
    current = getattr(dataloader, name, None)
    if isinstance(current, SkipFirst):
        return current
    if current is None or not isinstance(dataloader, DataLoader) or dataloader._dataset_kind != 0:
        return None  # an IterableDataset draws its own samples: nothing to skip by index
    skipper = SkipFirst(current)
    object.__setattr__(dataloader, name, skipper)
    if getattr(dataloader, "_iterator", None) is not None:
        dataloader._iterator = None
    return skipper


def epoch_generators(dataloader: DataLoader[Any]) -> list[torch.Generator]:
    """The distinct ``torch.Generator`` objects the loader and its samplers draw an epoch's order from."""
    found: dict[int, torch.Generator] = {}
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    for owner in (dataloader, getattr(dataloader, "sampler", None), getattr(batch_sampler, "sampler", None)):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator):
            found[id(generator)] = generator
    return list(found.values())


class EpochStart:
    """The generator states at the start of an epoch: enough to draw the epoch's order again.

    Args:
        generators: The loader's own generators (see :func:`epoch_generators`).
    """

    def __init__(self, generators: list[torch.Generator]) -> None:
        self.torch = torch.get_rng_state()
        self.generators = [g.get_state() for g in generators]

    def as_dict(self) -> dict[str, Any]:
        return {"torch": self.torch, "generators": self.generators}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpochStart:
        start = cls.__new__(cls)
        start.torch, start.generators = data["torch"], list(data["generators"])
        return start

    def replay(self, generators: list[torch.Generator], now: torch.Tensor | None = None) -> Callable[[], None]:
        """Put the epoch-start states back; the returned call sets the global generator to ``now``.

        Args:
            generators: The loader's generators, in the order their states were taken.
            now: The global generator's state to go back to; ``None``: its state at this call.
        """
        now = torch.get_rng_state() if now is None else now
        torch.set_rng_state(self.torch)
        for generator, state in zip(generators, self.generators, strict=False):
            generator.set_state(state)

        def restore() -> None:
            torch.set_rng_state(now)

        return restore


def sampler_state(samplers: list[Any]) -> dict[str, int] | None:
    """``epoch`` and ``seed`` of the loader's distributed sampler, or ``None`` where it has none."""
    for sampler in samplers:
        if isinstance(sampler, DistributedSampler):
            return {"epoch": int(sampler.epoch), "seed": int(sampler.seed)}
    return None


def reuses_workers(dataloader: DataLoader[Any]) -> bool:
    """Whether the loader keeps one worker iterator across epochs (``persistent_workers`` with workers)."""
    return bool(getattr(dataloader, "persistent_workers", False)) and int(getattr(dataloader, "num_workers", 0)) > 0
