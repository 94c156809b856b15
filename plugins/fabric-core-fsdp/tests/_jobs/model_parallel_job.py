"""Two processes run Fabric(strategy="model_parallel"): tensor parallel over 2 ranks + FSDP2 over the data dimension.

Writes OUTDIR/rank<N>.json, OUTDIR/sharded (folder), OUTDIR/full.pt and OUTDIR/reference.pt (rank 0).
Usage: python model_parallel_job.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from _common import batches, connect_like, loss_fn, max_difference
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from fabric_core import Fabric, spec
from fabric_core_fsdp import ModelParallelStrategy


def make_mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def parallelize(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    parallelize_module(model, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["data_parallel"])
    return model


def main(fabric: Fabric, outdir: str) -> None:
    rank = fabric.global_rank
    strategy = fabric.strategy
    assert isinstance(strategy, ModelParallelStrategy)
    out: dict[str, Any] = {"rank": rank, "mesh": list(strategy.mesh_shape)}
    out["mesh_dims"] = list(strategy.device_mesh.mesh_dim_names or ())
    out["sampler"] = strategy.distributed_sampler_kwargs
    model: Any = fabric.setup_module(make_mlp())
    reference = make_mlp()
    optimizer: Any = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.01))
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=0.01)
    out["local_numel"] = sum(p.to_local().numel() for p in model.parameters())
    out["total_numel"] = sum(p.numel() for p in reference.parameters())
    out["all_dtensor"] = all(isinstance(p, DTensor) for p in model.parameters())
    norms = []
    for x, y in batches(3):  # a tensor-parallel group reads the same batch
        fabric.backward(loss_fn(model(x), y))
        norm: Any = fabric.clip_gradients(model, optimizer, max_norm=0.1)
        norms.append(float(norm))
        optimizer.step()
        optimizer.zero_grad()
        torch.autograd.backward(loss_fn(reference(x), y))
        norms.append(float(torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=0.1)))
        ref_optimizer.step()
        ref_optimizer.zero_grad()
    out["norms"] = norms
    out["diff"] = max_difference(model, reference)

    folder = Path(outdir, "sharded")
    fabric.save(folder, {"model": model, "optimizer": optimizer, "step": 3})
    full = connect_like(fabric, ModelParallelStrategy(parallelize, save_distributed_checkpoint=False))
    full.save_checkpoint(Path(outdir, "full.pt"), {"model": model, "optimizer": optimizer, "step": 3})
    if fabric.is_global_zero:
        torch.save(
            {"model": reference.state_dict(), "optimizer": ref_optimizer.state_dict()}, Path(outdir, "reference.pt")
        )
    loaded: Any = fabric.setup_module(make_mlp(seed=4))
    loaded_optimizer: Any = fabric.setup_optimizers(torch.optim.AdamW(loaded.parameters(), lr=0.5))
    state: dict[str, Any] = {"model": loaded, "optimizer": loaded_optimizer, "step": 0}
    fabric.load(folder, state)
    out["loaded_step"] = state["step"]
    out["loaded_diff"] = max_difference(loaded, reference)
    out["loaded_lr"] = loaded_optimizer.param_groups[0]["lr"]
    out["lightning"] = compare_with_lightning(strategy, loaded, Path(outdir))
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(out))


def error_of(check: Any, strategy: Any) -> list[Any] | None:
    """``[is a ValueError, message]`` of what ``check(strategy)`` raises; ``None`` if it returns."""
    try:
        check(strategy)
    except Exception as error:  # the report says which
        return [isinstance(error, ValueError), str(error)]
    return None


def compare_with_lightning(strategy: ModelParallelStrategy, model: nn.Module, outdir: Path) -> dict[str, Any] | None:
    """The same loads on Lightning's strategy and ours, with a set-up (DTensor) model: ``{check: [theirs, ours]}``."""
    try:
        from lightning_fabric.strategies import ModelParallelStrategy as LightningModelParallelStrategy
    except ImportError:  # the compat extra is not installed
        return None
    theirs = LightningModelParallelStrategy(parallelize_fn=parallelize)
    empty = outdir / "empty"
    empty.mkdir(exist_ok=True)
    checks = {
        "a_folder_that_is_no_checkpoint": lambda s: s.load_checkpoint(empty, {"model": model}),
        "a_module_from_a_folder": lambda s: s.load_checkpoint(outdir / "sharded", model),
    }
    return {name: [error_of(check, theirs), error_of(check, strategy)] for name, check in checks.items()}


if __name__ == "__main__":
    # Spawn, as in fsdp_checkpoint_job.py: a forked FSDP rank once aborted in malloc.
    fabric = Fabric(
        accelerator="cpu", devices=2, strategy=spec("model_parallel", parallelize_fn=parallelize, start_method="spawn")
    )
    fabric.launch(main, sys.argv[1])
