"""A 2-process job: ``Fabric(loggers="wandb")`` found through the installed entry point, trained with ddp."""

from __future__ import annotations

import sys

import torch

from fabric_core import Fabric, spec

fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp", loggers=spec("wandb", project="p", save_dir=sys.argv[1]))
fabric.logger.log_hyperparams({"world_size": fabric.world_size})
model = torch.nn.Linear(4, 1)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
for step in range(3):
    fabric.backward(model(torch.ones(2, 4)).sum())
    optimizer.step()
    optimizer.zero_grad()
    fabric.log_dict({"rank": fabric.global_rank, "step_value": step}, step=step)
fabric.barrier()
fabric.logger.finalize("success")
