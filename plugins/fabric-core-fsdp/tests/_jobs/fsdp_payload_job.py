"""Two processes load sharded folders that carry payloads, or miss or cut a shard; and a clean one.

Rank 0 saves a folder with FSDP and derives the damaged copies; both ranks then load each one with
``fabric.load(folder, state)`` and record what was raised. Writes OUTDIR/rank<N>.json.
Usage: python fsdp_payload_job.py OUTDIR
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, half, loss_fn, make_model

from fabric_core import Fabric, spec
from fabric_core.testing.payloads import Payload, plant_in_metadata, plant_in_shard

CASES = ("metadata", "shard", "meta_pt", "missing", "truncated")


def set_up(fabric: Fabric, seed: int) -> dict[str, Any]:
    model: Any = fabric.setup_module(make_model(seed))
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.5))
    return {"model": model, "optimizer": optimizer, "step": 0}


def damage(root: Path, clean: Path) -> None:
    for name in (*CASES, "trusted"):
        shutil.copytree(clean, root / name)
    plant_in_metadata(root / "metadata", root / "PWNED")
    plant_in_shard(root / "shard", "optimizer.param_groups.0.lr", root / "PWNED")
    torch.save({"step": Payload(root / "PWNED")}, root / "meta_pt" / "meta.pt")
    (root / "missing" / "__1_0.distcp").unlink()
    cut = root / "truncated" / "__0_0.distcp"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    plant_in_shard(root / "trusted", "optimizer.param_groups.0.lr", root / "TRUSTED")


def main(fabric: Fabric, outdir: str) -> None:
    root = Path(outdir)
    rank = fabric.global_rank
    state = set_up(fabric, seed=0)
    for x, y in batches(1, device=fabric.device):
        fabric.backward(loss_fn(state["model"](half(x, rank)), half(y, rank)))
        state["optimizer"].step()
    state["step"] = 1
    fabric.save(root / "clean", state)
    if fabric.is_global_zero:
        damage(root, root / "clean")
    fabric.barrier()
    out: dict[str, Any] = {}
    restored = set_up(fabric, seed=1)
    for name in CASES:
        try:
            fabric.load(root / name, restored)
            out[name] = None
        except Exception as err:
            out[name] = {"type": type(err).__name__, "path": getattr(err, "path", None), "message": str(err)}
            out[name]["reason"] = getattr(err, "reason", None)
        fabric.barrier()
    fabric.load(root / "clean", restored)
    out["clean_step"] = restored["step"]
    out["clean_equal"] = all(
        torch.equal(p.full_tensor(), q.full_tensor())
        for p, q in zip(state["model"].parameters(), restored["model"].parameters(), strict=True)
    )
    restored["step"] = 0
    fabric.load(root / "trusted", restored, weights_only=False)
    out["trusted_step"] = restored["step"]
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    strategy = spec("fsdp", start_method="spawn", auto_wrap_policy={Block})
    fabric = Fabric(accelerator="cpu", devices=2, strategy=strategy)
    fabric.launch(main, sys.argv[1])
