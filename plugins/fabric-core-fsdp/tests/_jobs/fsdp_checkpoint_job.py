"""Two processes save FSDP checkpoints (sharded folder and full file) and load them into fresh models.

Writes OUTDIR/sharded (folder), OUTDIR/full.pt (file) and OUTDIR/rank<N>.json.
Usage: python fsdp_checkpoint_job.py ACCELERATOR OUTDIR
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, connected_strategy, half, loss_fn, make_model
from torch.distributed.tensor import DTensor

from fabric_core import Fabric, spec
from fabric_core.errors import InvalidConfigError
from fabric_core.io.atomic import _host_tag


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def same_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, other: Any, other_opt: Any) -> bool:
    """Parameters and optimizer state (every tensor) equal shard by shard."""
    for p, q in zip(model.parameters(), other.parameters(), strict=True):
        if not torch.equal(_local(p), _local(q)):
            return False
        mine, theirs = optimizer.state[p], other_opt.state[q]
        if set(mine) != set(theirs):
            return False
        if not all(torch.equal(_local(mine[k]), _local(theirs[k])) for k in mine):
            return False
    return True


def fresh(fabric: Fabric, seed: int, empty_init: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    info: dict[str, Any] = {}
    with fabric.init_module(empty_init=empty_init):
        created = make_model(seed)
    info["meta_before_setup"] = all(p.is_meta for p in created.parameters())
    model: Any = fabric.setup_module(created)
    info["meta_after_setup"] = any(p.is_meta for p in model.parameters())
    info["local_numel"] = sum(_local(p).numel() for p in model.parameters())
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.5))
    return model, optimizer, info


def main(fabric: Fabric, outdir: str) -> None:
    rank = fabric.global_rank
    out: dict[str, Any] = {"rank": rank}
    model: Any = fabric.setup_module(make_model())
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.01))
    for x, y in batches(2, device=fabric.device):
        fabric.backward(loss_fn(model(half(x, rank)), half(y, rank)))
        optimizer.step()
        optimizer.zero_grad()
    sharded, full = Path(outdir, "sharded"), Path(outdir, "full.pt")
    fabric.save(sharded, {"model": model, "optimizer": optimizer, "step": 1, "tag": "first"})
    if rank == 0:  # what a save of this path killed earlier on this host left behind
        dead = _dead_pid()
        Path(outdir, f".sharded.{_host_tag()}-{dead}-{'ab' * 6}.tmp").mkdir()
    fabric.barrier()
    # Replaces the folder of the first save in one step, and sweeps the dead writer's leftover.
    fabric.save(sharded, {"model": model, "optimizer": optimizer, "step": 2, "tag": "fsdp"})
    full_strategy = connected_strategy(fabric, state_dict_type="full")
    swapped = Path(outdir, "swapped")
    fabric.save(swapped, {"model": model})
    full_strategy.save_checkpoint(swapped, {"model": model})  # a full file replaces the sharded folder
    fabric.barrier()
    out["swapped_is_file"] = swapped.is_file()
    fabric.save(swapped, {"model": model})  # and a sharded folder the full file
    fabric.barrier()
    out["swapped_is_folder"] = swapped.is_dir()
    out["hidden_after_saves"] = sorted(p.name for p in Path(outdir).iterdir() if p.name.startswith("."))
    full_strategy.save_checkpoint(full, {"model": model, "optimizer": optimizer, "step": 2, "tag": "fsdp"})
    fabric.barrier()
    out["sharded_files"] = sorted(p.name for p in sharded.iterdir())
    try:
        fabric.save(Path(outdir, "filtered"), {"model": model}, filter={"model": lambda k, v: "bias" in k})
        out["filter_error"] = None
    except InvalidConfigError as err:
        out["filter_error"] = str(err)

    # A sharded load into a model initialised differently: parameters, optimizer state and extras come back.
    loaded, loaded_opt, _ = fresh(fabric, seed=5)
    state: dict[str, Any] = {"model": loaded, "optimizer": loaded_opt, "step": 0}
    remainder = fabric.load(sharded, state)
    out["sharded_load_equal"] = same_state(model, optimizer, loaded, loaded_opt)
    out["sharded_load_lr"] = loaded_opt.param_groups[0]["lr"]
    out["sharded_load_step"] = state["step"]
    out["sharded_remainder"] = remainder
    try:
        fabric.load(sharded, {"model": loaded, "missing": 1})
        out["strict_error"] = None
    except KeyError as err:
        out["strict_error"] = str(err)

    # empty_init: the model exists on the meta device until setup shards and allocates it; then load the full file.
    loaded, loaded_opt, info = fresh(fabric, seed=6, empty_init=True)
    out["empty_init"] = info
    state = {"model": loaded, "optimizer": loaded_opt}
    out["full_remainder"] = fabric.load(full, state)
    out["full_load_equal"] = same_state(model, optimizer, loaded, loaded_opt)

    # load_raw: a plain `torch.save(model.state_dict())` file into a sharded model.
    raw = Path(outdir, "raw.pt")
    if fabric.is_global_zero:
        torch.save(torch.load(full, weights_only=True)["model"], raw)
    fabric.barrier()
    loaded_raw: Any = fabric.setup_module(make_model(seed=7))
    fabric.load_raw(raw, loaded_raw)
    out["load_raw_equal"] = all(
        torch.equal(_local(p), _local(q)) for p, q in zip(model.parameters(), loaded_raw.parameters())
    )

    # Training goes on identically from the restored state.
    x, y = batches(1, seed=3, device=fabric.device)[0]
    for m, o in ((model, optimizer), (loaded, loaded_opt)):
        fabric.backward(loss_fn(m(half(x, rank)), half(y, rank)))
        o.step()
    out["equal_after_another_step"] = same_state(model, optimizer, loaded, loaded_opt)
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    accelerator, outdir = sys.argv[1:3]
    # Spawn, not fork: a forked rank once aborted in malloc ("unaligned tcache chunk", 1 run in about 70;
    # `import torch` leaves a native thread running, and fork copies only the calling thread).
    strategy = spec("fsdp", start_method="spawn", auto_wrap_policy={Block})
    fabric = Fabric(accelerator=accelerator, devices=2, strategy=strategy)
    fabric.launch(main, outdir)
