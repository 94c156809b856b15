"""One GPU: Fabric(strategy=STRATEGY, precision=PRECISION) trains, saves a sharded checkpoint and loads it back.

Writes OUTDIR/rank0.json. Usage: python fsdp_gpu_job.py STRATEGY PRECISION OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, loss_fn, make_model
from torch.distributed.tensor import DTensor

from fabric_core import Fabric, spec


def main(strategy: str, precision: str, outdir: str) -> None:
    fabric = Fabric(
        accelerator="cuda", devices=1, strategy=spec(strategy, auto_wrap_policy={Block}), precision=precision
    )
    fabric.launch()
    out: dict[str, Any] = {"rank": fabric.global_rank, "precision": type(fabric.strategy.precision).__name__}
    scaler = getattr(fabric.strategy.precision, "scaler", None)
    out["scaler"] = type(scaler).__name__ if scaler is not None else None
    model: Any = fabric.setup_module(make_model())
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.01))
    out["param_device"] = next(iter(model.parameters())).to_local().device.type
    x, y = batches(1, device=fabric.device)[0]
    losses = []
    for _ in range(20):
        loss = loss_fn(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    out["first_loss"], out["last_loss"] = losses[0], losses[-1]
    folder = Path(outdir, "sharded")
    fabric.save(folder, {"model": model, "optimizer": optimizer, "step": 20})
    loaded: Any = fabric.setup_module(make_model(seed=3))
    loaded_optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(loaded.parameters(), lr=0.5))
    state: dict[str, Any] = {"model": loaded, "optimizer": loaded_optimizer, "step": 0}
    fabric.load(folder, state)
    out["step"] = state["step"]
    out["equal"] = all(
        torch.equal(p.to_local().cpu(), q.to_local().cpu())
        for p, q in zip(model.parameters(), loaded.parameters())
        if isinstance(p, DTensor) and isinstance(q, DTensor)
    )
    Path(outdir, "rank0.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:4])
