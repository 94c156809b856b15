"""A Ray Train worker's job: two training steps with the strategy the launcher chose; rank 0 writes OUT/done.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from fabric_core import Fabric


def main(out: str) -> None:
    fabric = Fabric()
    torch.manual_seed(0)
    with fabric.init_module():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(fabric.global_rank))
    losses = []
    for _ in range(2):
        loss = model(x).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(fabric.all_reduce(loss.detach(), reduce_op="mean").item())
    if fabric.global_rank == 0:
        record = {
            "strategy": type(fabric.strategy).__name__,
            "world_size": fabric.world_size,
            "environment": type(fabric.strategy.cluster_environment).__name__,
            "backend": str(torch.distributed.get_backend()),
            "losses": losses,
        }
        Path(out, "done.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1])
