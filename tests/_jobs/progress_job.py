"""A 2-process job under `fabric-core run` with a forced progress bar on stdout.

Each rank logs ``rank_tag = 100 + rank`` so the output shows whose bar was drawn.
"""

from __future__ import annotations

import torch

from fabric_core import Fabric, spec

fabric = Fabric(callbacks=[spec("progress", force=True, total_steps=8, total_epochs=2, refresh_per_second=50)])
model = torch.nn.Linear(4, 1)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
for epoch in range(2):
    fabric.call("on_train_epoch_start", epoch=epoch)
    for _ in range(4):
        loss = model(torch.ones(2, 4)).sum()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        fabric.log_dict({"rank_tag": 100 + fabric.global_rank, "loss": 0.25})
fabric.call("on_train_end")
fabric.barrier()
