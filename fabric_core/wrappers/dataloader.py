"""``FabricDataLoader``: what ``fabric.setup_dataloaders`` returns; it moves batches, sets the epoch, and
saves and restores its position in the data (see :mod:`fabric_core.wrappers._data_position`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from fabric_core.errors import InvalidConfigError
from fabric_core.utilities.apply_func import move_data_to_device
from fabric_core.utilities.data import _epoch_samplers as epoch_samplers
from fabric_core.wrappers import _data_position as position

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

__all__ = ["FabricDataLoader"]

_FORMAT = 1
_KEYS = ("epoch", "in_epoch", "batches_yielded", "epoch_start", "sampler")


class _FabricDataLoader:
    """The dataloader ``fabric.setup_dataloaders`` returns: moves batches to the device and sets the epoch.

    Each ``iter()`` first calls ``set_epoch(n)`` on the sampler and on the batch sampler's sampler (each
    object once), where ``n`` counts the previous ``iter()`` calls, so that distributed shuffling changes
    from epoch to epoch without the user calling ``set_epoch``.

    Its position in the data is state: ``state_dict()`` holds the epoch, how many batches of it were
    yielded, the distributed sampler's ``seed`` and ``epoch``, and the generator states the epoch's order
    was drawn from; ``load_state_dict()`` makes the next ``iter()`` continue that epoch with the next batch
    (or start the next epoch when it had ended), skipping the yielded batches as indices, without loading
    them. So putting the loader in the state given to ``fabric.save``/``load`` or a run checkpoint resumes
    the data exactly. A loader with its own ``state_dict``/``load_state_dict`` (torchdata's
    ``StatefulDataLoader``) keeps its own position; only the epoch counter is added.

    Args:
        dataloader: The loader to wrap.
        device: Where batches go; ``None`` leaves them where the loader puts them.
    """

    def __init__(self, dataloader: DataLoader[Any], device: torch.device | None = None) -> None:
        self.__dict__.update(dataloader.__dict__)
        self._dataloader = dataloader
        self._device = device
        self._num_iter_calls = 0
        self._epoch_samplers = epoch_samplers(dataloader)
        self._delegates = callable(getattr(dataloader, "state_dict", None)) and callable(
            getattr(dataloader, "load_state_dict", None)
        )
        self._generators = position.epoch_generators(dataloader)
        self._yielded = 0
        self._in_epoch = False
        self._epoch_start: position.EpochStart | None = None
        self._resume: tuple[int, position.EpochStart | None] | None = None
        # Set by ``load_state_dict`` mid-epoch until the next ``iter()`` continues that epoch.
        self._pending = False

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
        self._in_epoch = True
        self._pending = False
        resume, self._resume = self._resume, None
        if resume is None:
            self._yielded = 0
            if not self._delegates:
                self._epoch_start = position.EpochStart(self._generators)
            iterator: Iterator[Any] = iter(self._dataloader)
        else:
            iterator = self._resumed(*resume)
        device = self._device
        if device is None:
            for batch in iterator:
                self._yielded += 1
                yield batch
        else:
            for batch in iterator:
                self._yielded += 1
                yield move_data_to_device(batch, device)
        self._in_epoch = False

    def _resumed(self, skip: int, start: position.EpochStart | None) -> Iterator[Any]:
        """An iterator over the rest of the interrupted epoch: its order drawn again, ``skip`` batches dropped."""
        self._yielded = skip
        self._epoch_start = start
        loader = self._dataloader
        skipper = position.install_skipper(loader) if skip or start is not None else None
        if skipper is not None:
            generators = self._generators
            skipper.skip = skip
            if start is not None and self._num_iter_calls > 1 and position.reuses_workers(loader):
                # An uninterrupted run reuses its worker iterator here, which draws no worker seed first: the
                # states go back just before the sampler draws, after the new iterator took its seed.
                now = torch.get_rng_state()
                skipper.replay = lambda: start.replay(generators, now)
            elif start is not None:
                restore = start.replay(generators)
                skipper.replay = lambda: restore
            return iter(loader)
        # No index sampler (an IterableDataset): the skipped batches are loaded and dropped.
        restore_now = start.replay(self._generators) if start is not None else None
        iterator = iter(loader)
        try:
            for _ in range(skip):
                next(iterator, None)
        finally:
            if restore_now is not None:
                restore_now()
        return iterator

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is in its data: epoch, batches yielded of it, sampler seed, generator states."""
        in_epoch = self._in_epoch or self._pending
        length = position.sized_length(self._dataloader)
        if in_epoch and length is not None and self._yielded >= length:
            in_epoch = False  # every batch was yielded: the next iter() starts a new epoch
        state: dict[str, Any] = {
            "format": _FORMAT,
            "epoch": self._num_iter_calls + (1 if self._pending else 0),
            "in_epoch": in_epoch,
            "batches_yielded": self._yielded,
            "epoch_start": self._epoch_start.as_dict() if self._epoch_start is not None else None,
            "sampler": position.sampler_state(self._epoch_samplers),
        }
        if self._delegates:
            state["loader"] = self._dataloader.state_dict()  # type: ignore[attr-defined]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict`` (what :meth:`state_dict` returned, maybe in another process).

        Raises:
            InvalidConfigError: ``state_dict`` is not such a state (also a ``KeyError``).
        """
        missing = [key for key in _KEYS if key not in state_dict] if isinstance(state_dict, dict) else list(_KEYS)
        if missing or (self._delegates and "loader" not in state_dict):
            raise InvalidConfigError(
                f"`FabricDataLoader.load_state_dict` got a state without {', '.join(missing or ['loader'])}: "
                f"expected what `state_dict()` returns, with the keys {', '.join(_KEYS)}.",
                argument="state_dict",
                value=state_dict,
            )
        epoch, in_epoch = int(state_dict["epoch"]), bool(state_dict["in_epoch"])
        sampler = state_dict["sampler"]
        if sampler is not None:
            for each in self._epoch_samplers:
                if hasattr(each, "seed"):
                    each.seed = int(sampler["seed"])
        if self._delegates:
            self._dataloader.load_state_dict(state_dict["loader"])  # type: ignore[attr-defined]
        self._num_iter_calls = epoch - 1 if in_epoch else epoch
        self._in_epoch = False
        self._yielded = int(state_dict["batches_yielded"])
        self._resume = None
        self._pending = in_epoch
        if in_epoch and not self._delegates:
            start = state_dict["epoch_start"]
            self._epoch_start = position.EpochStart.from_dict(start) if start is not None else None
            self._resume = (self._yielded, self._epoch_start)


#: The public name. The class keeps Lightning's name, which code checks (``type(x).__name__ == "_FabricDataLoader"``).
FabricDataLoader = _FabricDataLoader
