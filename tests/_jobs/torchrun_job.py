"""A script for plain torchrun: `Fabric(accelerator="cpu")` with every other argument left at its default.

Usage: python -m torch.distributed.run --nproc-per-node N ... torchrun_job.py OUTDIR
Each rank writes OUTDIR/rank<global rank>.json. No `fabric.launch()` before the first collective: the
processes torchrun started are joined at construction (a later `launch()` is harmless).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from fabric_core import Fabric

fabric = Fabric(accelerator="cpu")
total = fabric.all_reduce(torch.tensor([float(fabric.global_rank + 1)]), reduce_op="sum")
fabric.launch()
model = torch.nn.Linear(4, 1)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
loss = model(torch.randn(8, 4) + fabric.global_rank).pow(2).mean()
fabric.backward(loss)
optimizer.step()
weights = fabric.all_gather(model.weight.detach())
report = {
    "rank": fabric.global_rank,
    "local_rank": fabric.local_rank,
    "world_size": fabric.world_size,
    "sum": total.item(),
    "strategy": type(fabric.strategy).__name__,
    "environment": type(getattr(fabric.strategy, "cluster_environment", None)).__name__,
    "synchronised": bool(torch.equal(weights[0], weights[-1])),
}
Path(sys.argv[1], f"rank{fabric.global_rank}.json").write_text(json.dumps(report))
