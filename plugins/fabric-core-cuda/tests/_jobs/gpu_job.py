"""Train a tiny model on CUDA with Fabric and write what each rank saw to OUTDIR/rank<N>.json.

Usage: python gpu_job.py OUTDIR STRATEGY DEVICES PRECISION [ACCELERATOR]

ACCELERATOR defaults to ``cuda``; ``cpu`` runs the same job without a GPU (to check the job itself).

Run as a script (not imported by pytest) so that strategies which start their processes by running the
script again (``ddp``, ``fsdp``) work as they do for users.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fabric_core import Fabric

STEPS = 30


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))


def batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(100 + rank)
    weight = torch.linspace(-1.0, 1.0, 16)
    out = []
    for _ in range(STEPS):
        x = torch.randn(32, 16, generator=generator)
        out.append((x, (x @ weight).unsqueeze(1)))
    return out


def setup(fabric: Fabric, strategy: str) -> tuple[Any, Any]:
    if strategy.startswith("fsdp"):
        # Sharding replaces the parameters: the optimizer is created from the set-up module.
        wrapped = fabric.setup_module(make_model())
        optimizer = fabric.setup_optimizers(torch.optim.Adam(wrapped.parameters(), lr=1e-2))
        return wrapped, optimizer
    model = make_model()
    both: tuple[Any, Any] = fabric.setup(model, torch.optim.Adam(model.parameters(), lr=1e-2))
    return both


def full_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter, whole (sharded ones are gathered: every rank calls this in the same order)."""
    out = {}
    for name, param in sorted(model.named_parameters()):
        tensor = param.full_tensor() if hasattr(param, "full_tensor") else param
        out[name] = tensor.detach().float().cpu().clone()
    return out


def main(outdir: str, strategy: str, devices: str, precision: str, accelerator: str = "cuda") -> None:
    fabric = Fabric(accelerator=accelerator, strategy=strategy, devices=int(devices), precision=precision)
    fabric.launch()
    fabric.seed_everything(1234)
    model, optimizer = setup(fabric, strategy)
    report: dict[str, Any] = {
        "rank": fabric.global_rank,
        "world_size": fabric.world_size,
        "device": str(fabric.device),
        "current_device": torch.cuda.current_device() if accelerator == "cuda" else None,
        "strategy": type(fabric.strategy).__name__,
        "precision": type(fabric.strategy.precision).__name__,
    }
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        report["backend"] = torch.distributed.get_backend()
    scaler = getattr(fabric.strategy.precision, "scaler", None)
    report["scaler_device"] = getattr(scaler, "_device", None)
    losses = []
    for x, y in batches(fabric.global_rank):
        x, y = fabric.to_device((x, y))
        loss = nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    report["first_loss"], report["last_loss"] = losses[0], losses[-1]
    report["output_dtype"] = str(model(torch.zeros(2, 16, device=fabric.device)).dtype)
    report["param_device"] = str(next(model.parameters()).device)
    report["summed"] = fabric.all_reduce(torch.tensor(float(fabric.global_rank + 1)), reduce_op="sum").item()

    path = Path(outdir) / "checkpoint"
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": STEPS})
    before = full_parameters(model)
    restored_model, restored_optimizer = setup(fabric, strategy)
    state: dict[str, Any] = {"model": restored_model, "optimizer": restored_optimizer, "step": 0}
    remainder = fabric.load(path, state)
    after = full_parameters(restored_model)
    report["checkpoint_equal"] = sorted(before) == sorted(after) and all(
        torch.equal(before[k], after[k]) for k in before
    )
    report["restored_step"], report["remainder"] = state["step"], sorted(remainder)
    fabric.barrier()
    (Path(outdir) / f"rank{fabric.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:6])
