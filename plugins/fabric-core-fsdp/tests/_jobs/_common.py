"""Tiny models, data and helpers shared by the FSDP job scripts."""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from fabric_core import Fabric
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.precision.precision import Precision
from fabric_core.strategies.strategy import Strategy
from fabric_core_fsdp import FSDPStrategy

T = TypeVar("T", bound=Strategy)


class Block(nn.Module):
    """The unit FSDP shards on its own (``auto_wrap_policy={Block}``)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.linear(x))


def make_model(seed: int = 0) -> nn.Sequential:
    """Two blocks and a head: 180 parameters, every dimension 0 even, so 2 ranks split them exactly."""
    torch.manual_seed(seed)
    return nn.Sequential(Block(), Block(), nn.Linear(8, 4))


def batches(
    steps: int, size: int = 4, seed: int = 1, device: str | torch.device = "cpu"
) -> list[tuple[Tensor, Tensor]]:
    """The same ``(x, y)`` batches on every rank; each rank trains on its half."""
    generator = torch.Generator().manual_seed(seed)
    data = [
        (torch.randn(size, 8, generator=generator), torch.randn(size, 4, generator=generator)) for _ in range(steps)
    ]
    return [(x.to(device), y.to(device)) for x, y in data]


def half(t: Tensor, rank: int, world_size: int = 2) -> Tensor:
    """This rank's share of a batch."""
    n = t.shape[0] // world_size
    return t[rank * n : (rank + 1) * n]


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return nn.functional.mse_loss(output, target)


def max_difference(sharded: nn.Module, reference: nn.Module) -> float:
    """The largest elementwise difference between the gathered parameters and the reference's."""
    worst = 0.0
    for p, q in zip(sharded.parameters(), reference.parameters(), strict=True):
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        worst = max(worst, (full.detach().float().cpu() - q.detach().float().cpu()).abs().max().item())
    return worst


def connect_like(fabric: Fabric, strategy: T, precision: Precision | None = None) -> T:
    """Connect ``strategy`` to the accelerator, cluster environment and devices of ``fabric``'s strategy."""
    main: Any = fabric.strategy
    strategy.connect(
        accelerator=fabric.accelerator,
        precision=precision or Precision(),
        checkpoint_io=None,
        cluster_environment=main.cluster_environment or LightningEnvironment(),
        parallel_devices=main.parallel_devices or [],
        num_nodes=1,
    )
    return strategy


def connected_strategy(fabric: Fabric, precision: Precision | None = None, **options: Any) -> FSDPStrategy:
    """A second FSDP strategy in the processes of ``fabric`` (whose process group exists already)."""
    assert isinstance(fabric.strategy, FSDPStrategy)
    strategy = connect_like(fabric, FSDPStrategy(**options), precision)
    strategy.setup_environment()
    return strategy
