"""A 2-process job under `fabric-core run`: the profiler, throughput and logging reduced across ranks.

Each rank logs ``10 * step + rank`` three ways: reduced with ``mean`` and with ``max`` every step, and the mean
over a window of 3 steps; the throughput callback logs every 3 steps. The CSV logger writes
``<out>/run/version_0/metrics.csv``; the profiler writes one trace per rank into ``<out>/run/version_0/profiler``.
"""

from __future__ import annotations

import sys

import torch

from fabric_core import Fabric, spec
from fabric_core.loggers import CSVLogger

logger = CSVLogger(sys.argv[1], name="run", version=0, flush_logs_every_n_steps=1)
callbacks = [
    spec("profiler", wait=1, warmup=1, active=2, row_limit=5),
    spec("throughput", log_every_n_steps=3, batch_size=4),
]
fabric = Fabric(loggers=logger, callbacks=callbacks)
model = torch.nn.Linear(8, 2)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
for step in range(1, 7):
    fabric.backward(model(torch.ones(4, 8)).sum())
    optimizer.step()
    optimizer.zero_grad()
    value = 10.0 * step + fabric.global_rank
    fabric.log("mean_v", value, step=step, reduce="mean")
    fabric.log_dict({"max_v": value, "min_v": value}, step=step, reduce="max")
    fabric.log("window_v", value, step=step, reduce="mean", every_n_steps=3)
fabric.call("on_train_end")
logger.finalize("success")
fabric.barrier()
