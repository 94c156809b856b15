"""A script for `fabric-core run`: `Fabric()` with no arguments takes everything from the command line.

Usage: fabric-core run [options] cli_job.py OUTDIR MODE   (MODE: train, conflict or fail)
Each rank writes OUTDIR/rank<global rank>.json when it is done.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from fabric_core import Fabric

outdir, mode = sys.argv[1], sys.argv[2]
fabric = Fabric(devices=1) if mode == "conflict" else Fabric()

if mode == "fail" and fabric.global_rank == 1:
    raise RuntimeError("rank 1 failed on purpose")
fabric.seed_everything(0)
model = torch.nn.Linear(4, 1)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
for _ in range(2):
    loss = model(torch.randn(8, 4) + fabric.global_rank).pow(2).mean()
    optimizer.zero_grad()
    fabric.backward(loss)
    optimizer.step()
weights = fabric.all_gather(model.weight.detach())
report = {
    "rank": fabric.global_rank,
    "local_rank": fabric.local_rank,
    "node_rank": fabric.node_rank,
    "world_size": fabric.world_size,
    "strategy": type(fabric.strategy).__name__,
    "environment": type(fabric.strategy.cluster_environment).__name__,
    "precision": type(fabric.strategy.precision).__name__,
    "synchronised": bool(torch.equal(weights[0], weights[-1])),
    "master_port": os.environ.get("MASTER_PORT"),
}
Path(outdir, f"rank{fabric.global_rank}.json").write_text(json.dumps(report))
