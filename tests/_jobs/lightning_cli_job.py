"""A script for Lightning's `fabric run`, unchanged: it imports Lightning Fabric and builds `Fabric()` bare.

Usage: fabric run [options] lightning_cli_job.py OUTDIR
Each rank writes OUTDIR/rank<global rank>.json: which Fabric ran, with what, and the LT_* variables it saw.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from lightning_fabric import Fabric

fabric = Fabric()
model = torch.nn.Linear(4, 1)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
for _ in range(2):
    loss = model(torch.randn(8, 4) + fabric.global_rank).float().pow(2).mean()
    optimizer.zero_grad()
    fabric.backward(loss)
    optimizer.step()
weights = fabric.all_gather(model.weight.detach())
report = {
    "rank": fabric.global_rank,
    "world_size": fabric.world_size,
    "fabric": type(fabric).__module__,
    "strategy": type(fabric.strategy).__name__,
    "precision": type(fabric.strategy.precision).__name__,
    "synchronised": bool(torch.equal(weights[0], weights[-1])),
    "lt": {k: v for k, v in os.environ.items() if k.startswith("LT_")},
}
Path(sys.argv[1], f"rank{fabric.global_rank}.json").write_text(json.dumps(report))
