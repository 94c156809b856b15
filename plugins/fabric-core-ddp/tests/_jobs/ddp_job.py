"""A short two-process DDP run through Fabric.

Usage: python ddp_job.py STRATEGY MODE OUTDIR
STRATEGY: ddp (this script runs again as rank 1) or ddp_spawn. MODE: train (each rank writes
OUTDIR/rank<N>.json when done) or fail (rank 1 raises while rank 0 waits in a collective).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from fabric_core import Fabric


def train(fabric: Fabric, mode: str, outdir: str) -> None:
    rank = fabric.global_rank
    Path(outdir, f"pid{rank}").write_text(str(os.getpid()))
    torch.manual_seed(rank)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    if mode == "fail":
        if rank == 1:
            raise RuntimeError("rank 1 failed on purpose")
        fabric.all_reduce(torch.ones(1))
    for _ in range(3):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    weights = fabric.all_gather(torch.cat([p.detach().flatten() for p in model.parameters()]))
    report = {
        "rank": rank,
        "world_size": fabric.world_size,
        "equal": bool(torch.equal(weights[0], weights[1])),
        "backend": fabric.strategy.process_group_backend,
    }
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    strategy, mode, outdir = sys.argv[1:4]
    fabric = Fabric(accelerator="cpu", devices=2, strategy=strategy)
    if strategy == "ddp":
        fabric.launch()
        train(fabric, mode, outdir)
    else:
        fabric.launch(train, mode, outdir)
