"""Lightning's ``utilities.optimizer`` path: move an optimizer's state to a device.

Lightning's names are private (``_optimizers_to_device``, ``_optimizer_to_device``); they are here under the
same names.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

import torch
from torch.optim import Optimizer

from fabric_core._deferred import lightning_reexports
from fabric_core.utilities.apply_func import move_data_to_device

__all__: list[str] = []


def _optimizers_to_device(optimizers: Iterable[Optimizer], device: torch.device | str | int) -> None:
    """Move the state of every optimizer to ``device``, in place."""
    for optimizer in optimizers:
        _optimizer_to_device(optimizer, device)


def _optimizer_to_device(optimizer: Optimizer, device: torch.device | str | int) -> None:
    """Move one optimizer's state tensors to ``device``, in place.

    ``step`` stays where it is: Adam-style optimizers keep it on the CPU on purpose (a device tensor would
    cost a sync per step), and a state that is not a mapping (a custom optimizer's) is left alone.
    """
    for state in optimizer.state.values():
        if not isinstance(state, MutableMapping):
            continue
        for key, value in state.items():
            if key != "step":
                state[key] = move_data_to_device(value, device)

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
