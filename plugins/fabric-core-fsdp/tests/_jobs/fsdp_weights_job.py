"""N processes save a module's weights with ``fabric.save_raw`` and load them back with ``fabric.load_raw``.

Usage:
    python fsdp_weights_job.py STRATEGY DEVICES OUTDIR roundtrip
        Train one step, save OUTDIR/folder (small shards) and OUTDIR/one.safetensors, write the whole trained
        state to OUTDIR/reference.pt (rank 0), load the folder into a model of another seed and report whether
        every tensor equals the trained one (OUTDIR/rank<N>.json). STRATEGY: fsdp, model_parallel (tensor
        parallel x FSDP2: blocks cut along rows and columns), ddp, fsdp1.
    python fsdp_weights_job.py fsdp DEVICES OUTDIR memory
        Rank 0 writes OUTDIR/big (8 x Linear(1024) in 4 shards, the safetensors package); every rank sets up
        FSDP2 on a model of another seed, then reports the peak RSS its load adds (VmHWM reset first), its shard's
        bytes, the largest tensor's bytes, and whether the load was exact.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from model_parallel_job import parallelize  # tensor parallel over its Linear(0) and Linear(2), then FSDP2
from torch import nn
from torch.distributed.tensor import DTensor

from fabric_core import Fabric, spec
from fabric_core.io.weights.pieces import canonical
from fabric_core.wrappers import unwrap_objects


def make(seed: int) -> nn.Sequential:
    """Odd sizes, so that shards are uneven."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 14), nn.ReLU(), nn.Linear(14, 5))


def whole(module: nn.Module, fabric: Fabric) -> dict[str, torch.Tensor]:
    """Every tensor of ``module``'s state, whole (every rank calls it)."""
    if fabric.strategy.__class__.__name__ == "FSDP1Strategy":
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(unwrap_objects(module)):
            # named_parameters keeps the wrappers' prefixes (Fabric's, FSDP1's); the file has the plain names.
            return {canonical(name): p.detach().clone() for name, p in module.named_parameters()}
    state = module.state_dict()
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in state.items()}


def roundtrip(fabric: Fabric, outdir: Path) -> None:
    model = fabric.setup_module(make(0))
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.5))
    fabric.backward(model(torch.randn(4, 6)).square().sum())
    optimizer.step()
    trained = whole(model, fabric)
    if fabric.global_rank == 0:
        torch.save(trained, outdir / "reference.pt")
    fabric.save_raw(outdir / "folder", model, max_shard_size=200)
    fabric.save_raw(outdir / "one.safetensors", model)

    fresh = fabric.setup_module(make(1))
    untouched = whole(fresh, fabric)
    result = fabric.load_raw(outdir / "folder", fresh)
    loaded = whole(fresh, fabric)
    report = {
        "result": list(result),
        "equal": all(torch.equal(loaded[k], trained[k]) for k in trained),
        "differed_before": any(not torch.equal(untouched[k], trained[k]) for k in trained),
    }
    (outdir / f"rank{fabric.global_rank}.json").write_text(json.dumps(report))


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def memory(fabric: Fabric, outdir: Path) -> None:
    def big(seed: int) -> nn.Sequential:
        torch.manual_seed(seed)
        return nn.Sequential(*(nn.Linear(1024, 1024, bias=False) for _ in range(8)))

    folder = outdir / "big"
    if fabric.global_rank == 0:
        from safetensors.torch import save_file

        reference = big(0).state_dict()
        folder.mkdir()
        names = list(reference)
        weight_map = {}
        for i in range(4):
            file = f"model-{i + 1:05d}-of-00004.safetensors"
            part = {name: reference[name] for name in names[i * 2 : (i + 1) * 2]}
            save_file(part, folder / file)
            weight_map.update(dict.fromkeys(part, file))
        total = sum(t.numel() * t.element_size() for t in reference.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        del reference
    fabric.barrier()
    model = fabric.setup_module(big(1))
    shard_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status("VmRSS")
    fabric.load_raw(folder, model)
    added = _status("VmHWM") - before
    reference = big(0).state_dict()
    exact = all(torch.equal(p.full_tensor(), reference[name]) for name, p in model.state_dict().items())
    report = {"added": added, "shard": shard_bytes, "tensor": 1024 * 1024 * 4, "total": 8 * 1024 * 1024 * 4}
    report["exact"] = exact
    (outdir / f"rank{fabric.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    name, devices, out, mode = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    chosen: Any = spec("model_parallel", parallelize_fn=parallelize) if name == "model_parallel" else name
    fabric = Fabric(accelerator="cpu", devices=devices, strategy=chosen)
    fabric.launch()
    (roundtrip if mode == "roundtrip" else memory)(fabric, out)
