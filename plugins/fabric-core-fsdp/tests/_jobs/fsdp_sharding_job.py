"""Two processes train under each of Lightning's sharding strategies next to torch's DDP; each writes a report.

Usage: python fsdp_sharding_job.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, connected_strategy, half, loss_fn, make_model, max_difference
from torch import nn
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.nn.parallel import DistributedDataParallel

from fabric_core import Fabric, spec
from fabric_core.precision.precision import Precision
from fabric_core_fsdp import FSDPPrecision

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")


def train(fabric: Fabric, model: Any, step: Any) -> tuple[Any, float]:
    """SGD on half batches per rank; returns the model and the largest gradient difference to DDP's at step 1."""
    rank = fabric.global_rank
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    grads: list[Any] = []
    for x, y in batches(3, device=fabric.device):
        step(loss_fn(model(half(x, rank)), half(y, rank)))
        if not grads:
            grads = [
                p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad.clone() for p in model.parameters()
            ]
        optimizer.step()
        optimizer.zero_grad()
    return model, grads


def sharding(fabric: Fabric, out: dict[str, Any], outdir: str) -> None:
    """Each strategy against torch's DDP on the same data: final parameters, first gradients, what each rank holds."""
    ddp: Any = DistributedDataParallel(make_model())
    ddp, ddp_grads = train(fabric, ddp, lambda loss: loss.backward())
    for name in STRATEGIES:
        options: dict[str, Any] = {"sharding_strategy": name, "auto_wrap_policy": {Block}}
        if name == "_HYBRID_SHARD_ZERO2":
            options["device_mesh"] = (2, 1)  # two replicas of one shard each: the replicate dimension at work
        strategy = connected_strategy(fabric, Precision(), **options)
        # Rank 1 starts from other weights where there are replicas: they must start from rank 0's, as in DDP.
        replicated = name in ("NO_SHARD", "_HYBRID_SHARD_ZERO2")
        model: Any = strategy.setup_module(make_model(seed=fabric.global_rank if replicated else 0))
        weight = model[0].linear.weight
        report: dict[str, Any] = {
            "placements": [str(p) for p in weight.placements],
            "local_shape": list(weight.to_local().shape),
            "full_shape": list(weight.shape),
            "reported": str(strategy.sharding_strategy),
        }
        model, grads = train(fabric, model, lambda loss, s=strategy, m=model: s.backward(loss, m))
        report["grad_diff"] = max((g - r).abs().max().item() for g, r in zip(grads, ddp_grads, strict=True))
        report["param_diff"] = max_difference(model, ddp.module)
        out[name] = report
        if name == "NO_SHARD":
            # A NO_SHARD checkpoint (whole replicas) loads into a FULL_SHARD model (halves).
            path = Path(outdir, "no-shard-ckpt")
            strategy.save_checkpoint(path, {"model": model})
            other = connected_strategy(fabric, Precision())
            fresh: Any = other.setup_module(make_model(seed=5))
            other.load_checkpoint(path, {"model": fresh})
            out["no_shard_checkpoint_diff"] = max_difference(fresh, ddp.module)


def sync_module_states(fabric: Fabric, out: dict[str, Any]) -> None:
    """FULL_SHARD with sync_module_states=True: every rank starts from rank 0's weights before sharding."""
    strategy = connected_strategy(fabric, Precision(), sync_module_states=True)
    model = strategy.setup_module(make_model(seed=10 + fabric.global_rank))
    out["synced_diff_to_rank0_init"] = max_difference(model, make_model(seed=10))


def mixed_precision(fabric: Fabric, out: dict[str, Any]) -> None:
    """An FSDP1 MixedPrecision: params gathered in bf16, fp32 shards, buffers cast to buffer_dtype at setup."""
    config = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16)
    strategy = connected_strategy(fabric, Precision(), mixed_precision=config)
    torch.manual_seed(0)
    model: Any = strategy.setup_module(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1, device=fabric.device)[0]
    output = model(half(x, fabric.global_rank))
    strategy.backward(loss_fn(output.float(), half(y, fabric.global_rank)), model)
    optimizer.step()
    out["mp_output_dtype"] = str(output.dtype)
    out["mp_buffer_dtype"] = str(model[1].running_mean.dtype)
    out["mp_shard_dtype"] = str(model[0].weight.dtype)
    out["mp_grad_dtype"] = str(model[0].weight.grad.dtype)


def sharded_scaler(fabric: Fabric, out: dict[str, Any]) -> None:
    """16-mixed with the scaler Lightning passes (ShardedGradScaler): an inf on one rank skips the step on all."""
    rank = fabric.global_rank
    precision = FSDPPrecision("16-mixed", device=fabric.device.type, scaler=ShardedGradScaler(fabric.device.type))
    strategy = connected_strategy(fabric, precision)
    model: Any = strategy.setup_module(make_model())
    optimizer = strategy.setup_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = batches(1, device=fabric.device)[0]
    with precision.forward_context():
        output = model(half(x, rank))
    strategy.backward(loss_fn(output.float(), half(y, rank)), model)
    if rank == 1:
        with torch.no_grad():
            next(iter(model.parameters())).grad.to_local()[0, 0] = float("inf")
    before = [p.to_local().clone() for p in model.parameters()]
    strategy.optimizer_step(optimizer)
    out["sharded_scaler_skipped"] = all(torch.equal(b, p.to_local()) for b, p in zip(before, model.parameters()))
    out["sharded_scaler_scale"] = precision.scaler.get_scale() if precision.scaler is not None else None
    optimizer.zero_grad()
    # The next, finite step is taken on every rank.
    with precision.forward_context():
        output = model(half(x, rank))
    strategy.backward(loss_fn(output.float(), half(y, rank)), model)
    before = [p.to_local().clone() for p in model.parameters()]
    strategy.optimizer_step(optimizer)
    out["sharded_scaler_stepped_after"] = not all(
        torch.equal(b, p.to_local()) for b, p in zip(before, model.parameters())
    )


def main(fabric: Fabric, outdir: str) -> None:
    out: dict[str, Any] = {"rank": fabric.global_rank, "world_size": fabric.world_size}
    sharding(fabric, out, outdir)
    sync_module_states(fabric, out)
    mixed_precision(fabric, out)
    sharded_scaler(fabric, out)
    Path(outdir, f"rank{fabric.global_rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    fabric = Fabric(accelerator="cpu", devices=2, strategy=spec("fsdp", start_method="popen"))
    fabric.launch(main, sys.argv[1])
