"""Two processes train with Fabric(strategy="fsdp") next to an unsharded reference; each writes OUTDIR/rank<N>.json.

Usage: python fsdp_train_job.py START_METHOD ACCELERATOR OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, connected_strategy, half, loss_fn, make_model, max_difference
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from fabric_core import Fabric, spec
from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import Precision
from fabric_core.utilities import GatheredParameters
from fabric_core_fsdp import FSDPPrecision


def resharded(model: Any) -> dict[str, bool]:
    """Per unit of ``make_model()``: whether its parameters are the sharded DTensors (not the gathered ones)."""
    return {"block": isinstance(model[0].linear.weight, DTensor), "root": isinstance(model[2].weight, DTensor)}


def train_steps(fabric: Fabric, out: dict[str, Any]) -> None:
    """Half batches per rank with clipping by norm vs the reference on full batches."""
    rank, device = fabric.global_rank, fabric.device
    reference = make_model().to(device)
    model: Any = fabric.setup_module(make_model())
    optimizer: Any = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    out["units"] = sorted({type(m).__name__ for m in model.modules() if isinstance(m, FSDPModule)})
    out["local_numel"] = sum(p.to_local().numel() for p in model.parameters())
    out["total_numel"] = sum(p.numel() for p in reference.parameters())
    out["all_dtensor"] = all(isinstance(p, DTensor) for p in model.parameters())
    norms = []
    for x, y in batches(3, device=device):
        output = model(half(x, rank))
        if not norms:  # between forward and backward: which units registered their shards again
            out["resharded_after_forward"] = resharded(model.module)
        fabric.backward(loss_fn(output, half(y, rank)))
        norm: Any = fabric.clip_gradients(model, optimizer, max_norm=0.05)
        optimizer.step()
        optimizer.zero_grad()
        torch.autograd.backward(loss_fn(reference(x), y))
        ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=0.05)
        ref_optimizer.step()
        ref_optimizer.zero_grad()
        norms.append((float(norm), float(ref_norm)))
    out["norms"] = norms
    out["norm_type"] = type(norm).__name__
    out["diff_after_clip_norm"] = max_difference(model, reference)

    # Clipping by value, then gradient accumulation with the first micro-batch unsynchronised.
    (x, y), (x2, y2) = batches(2, seed=7, device=device)
    fabric.backward(loss_fn(model(half(x, rank)), half(y, rank)))
    fabric.clip_gradients(model, optimizer, clip_val=0.01)
    out["max_grad_after_clip_value"] = max(p.grad.to_local().abs().max().item() for p in model.parameters())
    optimizer.step()
    optimizer.zero_grad()
    torch.autograd.backward(loss_fn(reference(x), y))
    torch.nn.utils.clip_grad_value_(reference.parameters(), 0.01)
    ref_optimizer.step()
    ref_optimizer.zero_grad()
    out["diff_after_clip_value"] = max_difference(model, reference)
    with fabric.no_backward_sync(model):
        fabric.backward(loss_fn(model(half(x, rank)), half(y, rank)))
    # FSDP2 keeps unsynchronised gradients unsharded and unreduced: the shards get none until the sync.
    out["sharded_grads_while_unsynced"] = sum(p.grad is not None for p in model.parameters())
    fabric.backward(loss_fn(model(half(x2, rank)), half(y2, rank)))
    optimizer.step()
    torch.autograd.backward(loss_fn(reference(x), y) + loss_fn(reference(x2), y2))
    ref_optimizer.step()
    out["diff_after_accumulation"] = max_difference(model, reference)

    # Gathered parameters: whole inside; rank 0's edits are written to every rank's shards.
    with GatheredParameters(model.parameters(), modifier_rank=0):
        head: Any = model.module[2]
        out["gathered_shape"] = list(head.weight.shape)
        out["gathered_is_dtensor"] = isinstance(head.weight, DTensor)
        with torch.no_grad():
            head.weight.fill_(3.0 + rank)
    full = head.weight.full_tensor()
    out["after_gather_first_last"] = [full[0, 0].item(), full[-1, -1].item()]


def setup_checks(fabric: Fabric, out: dict[str, Any]) -> None:
    """An optimizer created before setup: refused alone, re-pointed at the shards with fabric.setup()."""
    try:
        fabric.setup_optimizers(torch.optim.SGD(make_model().parameters(), lr=0.1))
        out["early_optimizer_error"] = None
    except InvalidConfigError as err:
        out["early_optimizer_error"] = str(err)
    rank, device = fabric.global_rank, fabric.device
    model, reference = make_model(), make_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    ref_optimizer = torch.optim.Adam(reference.parameters(), lr=0.01)
    out["joint_optimizer_dtensors"] = all(isinstance(p, DTensor) for p in optimizer.param_groups[0]["params"])
    for x, y in batches(2, device=device):
        fabric.backward(loss_fn(model(half(x, rank)), half(y, rank)))
        optimizer.step()
        optimizer.zero_grad()
        torch.autograd.backward(loss_fn(reference(x), y))
        ref_optimizer.step()
        ref_optimizer.zero_grad()
    out["diff_joint_setup"] = max_difference(model, reference)


def variants(fabric: Fabric, out: dict[str, Any]) -> None:
    """Hybrid sharding + SHARD_GRAD_OP + activation checkpointing; bf16-mixed; 16-mixed's scaler."""
    rank, device = fabric.global_rank, fabric.device
    strategy = connected_strategy(
        fabric,
        Precision(),
        device_mesh=(2, 1),
        sharding_strategy="SHARD_GRAD_OP",
        activation_checkpointing_policy={Block},
    )
    model: Any = strategy.setup_module(make_model())
    reference = make_model().to(device)
    out["hybrid_placements"] = [str(p) for p in next(iter(model.parameters())).placements]
    out["checkpoint_wrapped"] = sum("CheckpointWrapper" in type(m).__name__ for m in model.modules())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in batches(2, device=device):
        strategy.backward(loss_fn(model(half(x, rank)), half(y, rank)), model)
        optimizer.step()
        optimizer.zero_grad()
        torch.autograd.backward(loss_fn(reference(x), y))
        ref_optimizer.step()
        ref_optimizer.zero_grad()
    out["diff_hybrid"] = max_difference(model, reference)

    strategy = connected_strategy(fabric, Precision(), auto_wrap_policy={Block}, reshard_after_forward=True)
    model = strategy.setup_module(make_model())
    x, y = batches(1, device=device)[0]
    output = model(half(x, rank))
    out["resharded_after_forward_when_asked"] = resharded(model)
    strategy.backward(loss_fn(output, half(y, rank)), model)

    precision = FSDPPrecision("bf16-mixed", device=device.type)
    strategy = connected_strategy(fabric, precision, auto_wrap_policy={Block})
    model = strategy.setup_module(make_model())
    x, y = batches(1, device=device)[0]
    with precision.forward_context():
        output = model(half(x, rank))
    out["bf16_output_dtype"] = str(output.dtype)
    out["bf16_param_dtype"] = str(next(iter(model.parameters())).dtype)

    precision = FSDPPrecision("16-mixed", device=device.type)
    strategy = connected_strategy(fabric, precision)
    model = strategy.setup_module(make_model())
    fp16_optimizer = strategy.setup_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    strategy.backward(loss_fn(model(half(x, rank)), half(y, rank)).float(), model)
    if rank == 1:
        with torch.no_grad():
            next(iter(model.parameters())).grad.to_local()[0, 0] = float("inf")
    before = [p.to_local().clone() for p in model.parameters()]
    strategy.optimizer_step(fp16_optimizer)
    out["fp16_step_skipped"] = all(torch.equal(b, p.to_local()) for b, p in zip(before, model.parameters()))
    out["fp16_scale_after_overflow"] = precision.scaler.get_scale() if precision.scaler is not None else None


def main(fabric: Fabric, outdir: str) -> None:
    out: dict[str, Any] = {"rank": fabric.global_rank, "world_size": fabric.world_size}
    train_steps(fabric, out)
    setup_checks(fabric, out)
    variants(fabric, out)
    Path(outdir, f"rank{fabric.global_rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    start_method, accelerator, outdir = sys.argv[1:4]
    fabric = Fabric(
        accelerator=accelerator, devices=2, strategy=spec("fsdp", start_method=start_method, auto_wrap_policy={Block})
    )
    fabric.launch(main, outdir)
