"""What tracking the position in the data costs: MLP steps/s drawing batches from a shuffled loader.

Raw PyTorch iterates a plain ``DataLoader``. fabric-core iterates the loader ``fabric.setup_dataloaders``
returns (``move_to_device=False``), which counts the batches it yields so that its ``state_dict()`` can
resume mid-epoch; that count is the only per-batch work it adds. Both feed the same raw model and optimizer,
so the ratio is the cost of the loader alone. A third variant moves each batch to the device as well
(``move_to_device=True``, the default; on CPU a walk over the batch that moves nothing).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from _harness import CORE, RAW, Goal, RowResult, row_result
from rows_steps import _interleave_steps, _model
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["collect"]

MOVED = "fabric-core, move_to_device=True"


def _loader_step(loader: Iterable[Any], model: nn.Module) -> Callable[[], None]:
    """One SGD step on the next batch of ``loader``, starting a new epoch when one ends."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    current = [iter(loader)]

    def step() -> None:
        try:
            x, y = next(current[0])
        except StopIteration:
            current[0] = iter(loader)
            x, y = next(current[0])
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def _row(quick: bool) -> RowResult:
    from fabric_core import Fabric

    base, _, _ = _model("mlp")
    generator = torch.Generator().manual_seed(1)
    dataset = TensorDataset(torch.randn(64 * 40, 784, generator=generator), torch.randint(0, 10, (64 * 40,)))

    def plain() -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=64, shuffle=True)

    fabric = Fabric(accelerator="cpu", devices=1)
    steps: dict[str, Callable[[], None]] = {
        RAW: _loader_step(plain(), copy.deepcopy(base)),
        CORE: _loader_step(fabric.setup_dataloaders(plain(), move_to_device=False), copy.deepcopy(base)),
        MOVED: _loader_step(fabric.setup_dataloaders(plain()), copy.deepcopy(base)),
    }
    values, repeat = _interleave_steps(steps, quick, seed=11)
    return row_result(
        "steps_data_position",
        "steps/s MLP 784-256-10, batch 64, from a shuffled DataLoader: position-tracking loader vs plain",
        values,
        metric="rate",
        goal=Goal(">=", 0.99),
        labels={
            CORE: "fabric.setup_dataloaders(loader, move_to_device=False): counts batches for state_dict()",
            MOVED: "the same with move_to_device=True (the default)",
        },
        note=f"Raw model and SGD on every side; 40 batches per epoch; {repeat} steps per timed block.",
    )


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure ``steps_data_position`` (when selected).

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        The rows measured.
    """
    return [_row(quick)] if rows is None or "steps_data_position" in rows else []
