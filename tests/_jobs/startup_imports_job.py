"""The same small training loop in a fresh interpreter, reporting which heavy modules it imported.

Usage: python startup_imports_job.py MODE OUTDIR
MODE: raw (plain PyTorch), raw_ddp (plain PyTorch DDP; RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by the
caller), fabric (``Fabric(accelerator="cpu", devices=1)``), ddp (``Fabric(..., devices=2, strategy="ddp")``, this
script runs again as rank 1), folder (a fresh process loading the sharded folder OUTDIR/sharded with
``fabric.load``). Each process writes OUTDIR/MODE-rank<r>.json: the loaded modules under watch, the registration
modules the plugin manager loaded, and what the loop computed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

#: Module trees whose import is reported (the names are roots: a submodule counts for its root).
WATCHED = (
    "torch.distributed.checkpoint",
    "torch.distributed.tensor",
    "torch._dynamo",
    "deepspeed",
    "ray",
    "mlflow",
    "wandb",
    "torch_xla",
    "bitsandbytes",
)


def loaded(roots: tuple[str, ...]) -> list[str]:
    """The roots in ``roots`` of which this process imported the module or a submodule."""
    return sorted(root for root in roots if any(m == root or m.startswith(root + ".") for m in sys.modules))


def model_and_optimizer() -> tuple[torch.nn.Module, torch.nn.Linear, torch.optim.Optimizer]:
    """The model, its first layer (whose weight the checks compare) and its optimizer."""
    torch.manual_seed(0)
    first = torch.nn.Linear(8, 16)
    model = torch.nn.Sequential(first, torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return model, first, torch.optim.SGD(model.parameters(), lr=0.1)


def report(mode: str, outdir: Path, rank: int, **values: Any) -> None:
    values["watched"] = loaded(WATCHED)
    values["plugin_modules"] = sorted(m for m in sys.modules if m.startswith("fabric_core_"))
    Path(outdir, f"{mode}-rank{rank}.json").write_text(json.dumps(values))


def raw(mode: str, outdir: Path) -> None:
    rank = 0
    if mode == "raw_ddp":
        torch.distributed.init_process_group("gloo")
        rank = torch.distributed.get_rank()
    model, first, optimizer = model_and_optimizer()
    trained: torch.nn.Module = model
    if mode == "raw_ddp":
        trained = torch.nn.parallel.DistributedDataParallel(model)
    before = first.weight.detach().clone()
    trained(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    path = Path(outdir, f"{mode}.pt")
    if rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    if mode == "raw_ddp":
        torch.distributed.barrier()
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    changed = not torch.equal(before, first.weight)
    if mode == "raw_ddp":
        torch.distributed.destroy_process_group()
    report(mode, outdir, rank, stepped=changed)


def fabric(mode: str, outdir: Path) -> None:
    from fabric_core import Fabric

    if mode == "folder":
        f = Fabric(accelerator="cpu", devices=1)
        net, first, _ = model_and_optimizer()
        f.load(Path(outdir, "sharded"), {"model": f.setup_module(net)})
        report(mode, outdir, 0, weight_sum=float(first.weight.detach().sum()))
        return
    if mode == "ddp":
        f = Fabric(accelerator="cpu", devices=2, strategy="ddp")
        f.launch()
    else:
        f = Fabric(accelerator="cpu", devices=1)
    net, first, optimizer = model_and_optimizer()
    model, optimizer = f.setup(net, optimizer)
    before = first.weight.detach().clone()
    f.backward(model(torch.randn(4, 8)).sum())
    optimizer.step()
    path = Path(outdir, f"{mode}.ckpt")
    f.save(path, {"model": model, "optimizer": optimizer, "step": 1})
    saved = first.weight.detach().clone()
    with torch.no_grad():
        first.weight.zero_()
    remainder = f.load(path, {"model": model, "optimizer": optimizer})
    report(
        mode,
        outdir,
        f.global_rank,
        stepped=not torch.equal(before, saved),
        restored=torch.equal(saved, first.weight),
        remainder=remainder,
        strategy=type(f.strategy).__name__,
        world_size=f.world_size,
    )


def main(mode: str, outdir: str) -> None:
    if mode in ("raw", "raw_ddp"):
        raw(mode, Path(outdir))
    else:
        fabric(mode, Path(outdir))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else os.getcwd())
