"""Two processes save sharded checkpoints into an S3 bucket and load them back (``AWS_ENDPOINT_URL`` names it).

Usage: python fsdp_object_storage_job.py STRATEGY BACKGROUND BUCKET OUTDIR
    STRATEGY: ``fsdp`` or ``model_parallel``; BACKGROUND: ``1`` with ``AsyncCheckpointIO``, ``0`` without.

Trains 2 steps, saves BUCKET/sharded (and, with the same tensors, a full file BUCKET/full.ckpt written by
rank 0), saves the run checkpoints of steps 1 and 2 into BUCKET/run (keep_last=1), then loads each back
into scrambled parameters. Rank 0 writes OUTDIR/reference.pt (the full tensors of step 2); each rank writes
OUTDIR/rank<N>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, connect_like, half, loss_fn, make_model
from torch.distributed.tensor import distribute_tensor

from fabric_core import Fabric, spec
from fabric_core.io.async_io import AsyncCheckpointIO
from fabric_core.run_checkpoints import RunCheckpoints
from fabric_core_fsdp import FSDPStrategy, ModelParallelStrategy


def parallelize(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for block in model[:2]:
        fully_shard(block, mesh=mesh["tensor_parallel"])  # the 2 ranks of the mesh's larger dimension
    fully_shard(model, mesh=mesh["tensor_parallel"])
    return model


def full_state(model: Any, optimizer: Any) -> dict[str, list[torch.Tensor]]:
    params = list(model.parameters())
    return {
        "model": [p.full_tensor().clone() for p in params],
        "exp_avg": [optimizer.state[p]["exp_avg"].full_tensor().clone() for p in params],
    }


def scramble(model: Any) -> None:
    fresh = make_model(seed=5)
    with torch.no_grad():
        for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
            p.copy_(distribute_tensor(q, p.device_mesh, p.placements))


def full_strategy(fabric: Fabric, name: str) -> Any:
    """The same strategy writing one full file (rank 0), connected as Fabric connected the job's."""
    full = (
        FSDPStrategy(state_dict_type="full")
        if name == "fsdp"
        else ModelParallelStrategy(parallelize, save_distributed_checkpoint=False)
    )
    connect_like(fabric, full)
    return full


def main(fabric: Fabric, name: str, bucket: str, outdir: Path) -> None:
    model: Any = fabric.setup_module(make_model(seed=0))
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.1))
    data = batches(3)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        x, y = half(x, fabric.global_rank, fabric.world_size), half(y, fabric.global_rank, fabric.world_size)
        optimizer.zero_grad()
        fabric.backward(loss_fn(model(x), y))
        optimizer.step()

    step(*data[0])
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 1}
    ckpt = RunCheckpoints(fabric, f"{bucket}/run", keep_last=1, signals=())
    ckpt.save(1, state)
    step(*data[1])
    state["step"] = 2
    reference = full_state(model, optimizer)
    if fabric.is_global_zero:
        torch.save(reference, outdir / "reference.pt")
    fabric.save(f"{bucket}/sharded", state)
    saved_at = ckpt.save(2, state)
    full_strategy(fabric, name).save_checkpoint(f"{bucket}/full.ckpt", {"model": model, "step": 2})
    step(*data[2])  # changes the shards in place, while a background save may still be writing

    def equal(keys: tuple[str, ...] = ("model", "exp_avg")) -> dict[str, bool]:
        now = full_state(model, optimizer)
        return {k: all(torch.equal(a, b) for a, b in zip(now[k], reference[k], strict=True)) for k in keys}

    report: dict[str, Any] = {"saved_at": saved_at, "world_size": fabric.world_size}
    loaded: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
    scramble(model)
    fabric.load(f"{bucket}/sharded", loaded)
    report["sharded"] = {"step": loaded["step"], "equal": equal()}
    scramble(model)
    report["resumed_step"] = RunCheckpoints(fabric, f"{bucket}/run", signals=()).resume(loaded)
    report["resumed"] = equal()
    report["latest"] = ckpt.latest()
    scramble(model)
    remainder = fabric.load(f"{bucket}/full.ckpt", {"model": model})
    report["full"] = {"remainder": remainder, "equal": equal(("model",))}
    (outdir / f"rank{fabric.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    name, background, bucket, outdir = sys.argv[1], sys.argv[2] == "1", sys.argv[3], Path(sys.argv[4])
    options = {"auto_wrap_policy": {Block}} if name == "fsdp" else {"parallelize_fn": parallelize}
    plugins = [AsyncCheckpointIO()] if background else None
    fabric = Fabric(
        accelerator="cpu",
        devices=2,
        strategy=spec(name, start_method="spawn", **options),
        plugins=plugins,
    )
    fabric.launch(main, name, bucket, outdir)
