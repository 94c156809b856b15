"""``FabricDataLoader``: what ``fabric.setup_dataloaders`` returns; it moves batches and sets the epoch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from fabric_core.utilities.apply_func import move_data_to_device

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

__all__ = ["FabricDataLoader"]


class FabricDataLoader:
    """The dataloader ``fabric.setup_dataloaders`` returns: moves batches to the device and sets the epoch.

    Each ``iter()`` first calls ``set_epoch(n)`` on the sampler and on the batch sampler's sampler (each
    object once), where ``n`` counts the previous ``iter()`` calls, so that distributed shuffling changes
    from epoch to epoch without the user calling ``set_epoch``.

    Args:
        dataloader: The loader to wrap.
        device: Where batches go; ``None`` leaves them where the loader puts them.
    """

    def __init__(self, dataloader: DataLoader[Any], device: torch.device | None = None) -> None:
        self.__dict__.update(dataloader.__dict__)
        self._dataloader = dataloader
        self._device = device
        self._num_iter_calls = 0
        samplers: dict[int, Any] = {}
        batch_sampler = getattr(dataloader, "batch_sampler", None)
        for sampler in (getattr(dataloader, "sampler", None), getattr(batch_sampler, "sampler", None)):
            if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
                samplers[id(sampler)] = sampler
        self._epoch_samplers = list(samplers.values())

    @property
    def device(self) -> torch.device | None:
        """Where batches are moved; ``None`` when they are not."""
        return self._device

    @property
    def dataloader(self) -> DataLoader[Any]:
        """The wrapped loader."""
        return self._dataloader

    def __len__(self) -> int:
        return len(self._dataloader)

    def __iter__(self) -> Iterator[Any]:
        for sampler in self._epoch_samplers:
            sampler.set_epoch(self._num_iter_calls)
        self._num_iter_calls += 1
        if self._device is None:
            yield from self._dataloader
            return
        device = self._device
        for batch in self._dataloader:
            yield move_data_to_device(batch, device)
