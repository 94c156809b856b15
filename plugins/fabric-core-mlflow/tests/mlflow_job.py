"""A 2-process job: ``Fabric(loggers="mlflow")`` found through the installed entry point, trained with ddp."""

from __future__ import annotations

import sys

import torch

from fabric_core import Fabric, spec

root = sys.argv[1]
fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp", loggers=spec("mlflow", root_dir=root, run_name="ddp"))
fabric.logger.log_hyperparams({"world_size": fabric.world_size})
model = torch.nn.Linear(4, 1)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
for step in range(3):
    loss = model(torch.ones(2, 4)).sum()
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    fabric.log_dict({"rank": fabric.global_rank, "step_value": step}, step=step)
fabric.barrier()
fabric.logger.finalize("success")
