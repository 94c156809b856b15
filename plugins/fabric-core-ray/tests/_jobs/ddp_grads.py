"""A Ray Train worker's job: one ddp step on rank-specific data, then save and report the checkpoint to Ray.

Writes what each rank saw to OUT/rank<R>.json.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch

import fabric_core_ray
from fabric_core import Fabric


def main(out: str) -> None:
    fabric = Fabric()  # everything from the launcher: accelerator, strategy, devices, ranks
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    local = copy.deepcopy(model)  # the same weights, never synchronised: this rank's own gradient
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(100 + fabric.global_rank))
    fabric.backward(model(x).pow(2).sum())
    local(x).pow(2).sum().backward()
    optimizer.step()
    record = {
        "rank": fabric.global_rank,
        "world_size": fabric.world_size,
        "local_rank": fabric.local_rank,
        "node_rank": fabric.node_rank,
        "environment": type(fabric.strategy.cluster_environment).__name__,
        "strategy": type(fabric.strategy).__name__,
        "backend": str(torch.distributed.get_backend()),
        "synced_grad": [p.grad.flatten().tolist() for p in model.parameters()],
        "local_grad": [p.grad.flatten().tolist() for p in local.parameters()],
        "params": [p.detach().flatten().tolist() for p in model.parameters()],
    }
    Path(out, f"rank{fabric.global_rank}.json").write_text(json.dumps(record))
    # Every rank saves (rank 0 writes the file) and reports: Ray's storage then holds the checkpoint.
    checkpoint = Path(out, "step1.ckpt")
    fabric.save(checkpoint, {"model": model, "step": 1})
    fabric_core_ray.report(fabric, checkpoint, {"step": 1, "loss": 0.5})


if __name__ == "__main__":
    main(sys.argv[1])
