"""Background sharded saves (``AsyncCheckpointIO`` + FSDP) and loads on another number of processes.

Usage:
    python fsdp_async_job.py save DEVICES DIR   # train 2 steps, save DIR/sharded and the run checkpoint
    #                                           DIR/run/step-2 in the background, step again
    python fsdp_async_job.py load DEVICES DIR   # load DIR/sharded, then resume DIR/run; compare with
    #                                           DIR/reference.pt

Each rank writes DIR/<mode>-rank<N>.json. The save job exits without waiting: the exit must.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, half, loss_fn, make_model

import fabric_core_fsdp._state as fsdp_state
from fabric_core import Fabric, spec
from fabric_core.io.async_io import AsyncCheckpointIO
from fabric_core.run_checkpoints import RunCheckpoints


def full_state(model: Any, optimizer: Any) -> dict[str, Any]:
    params = list(model.parameters())
    return {
        "model": [p.full_tensor().clone() for p in params],
        "exp_avg": [optimizer.state[p]["exp_avg"].full_tensor().clone() for p in params],
        "exp_avg_sq": [optimizer.state[p]["exp_avg_sq"].full_tensor().clone() for p in params],
    }


def save(fabric: Fabric, directory: Path) -> None:
    calls: list[str] = []
    real = fsdp_state.dcp_async_save

    def counting(*args: Any, **kwargs: Any) -> Any:  # counts the calls; the real function does the work
        calls.append(torch.distributed.get_backend(kwargs["process_group"]))
        return real(*args, **kwargs)

    fsdp_state.dcp_async_save = counting
    model: Any = fabric.setup_module(make_model(seed=0))
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.1))

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        x, y = half(x, fabric.global_rank, fabric.world_size), half(y, fabric.global_rank, fabric.world_size)
        optimizer.zero_grad()
        fabric.backward(loss_fn(model(x), y))
        optimizer.step()

    data = batches(4)
    for x, y in data[:2]:
        step(x, y)
    reference = full_state(model, optimizer)
    if fabric.global_rank == 0:
        torch.save(reference, directory / "reference.pt")
    fabric.save(directory / "sharded", {"model": model, "optimizer": optimizer, "step": 2})
    # A run checkpoint too: its marker is written by rank 0 in the background, after every rank's shards.
    RunCheckpoints(fabric, directory / "run", signals=()).save(2, {"model": model, "optimizer": optimizer})
    step(*data[2])  # changes the shards in place while the save may still be writing: not in the checkpoint
    changed = not torch.equal(full_state(model, optimizer)["model"][0], reference["model"][0])
    report = {"async_save_calls": calls, "changed_after_save": changed, "world_size": fabric.world_size}
    (directory / f"save-rank{fabric.global_rank}.json").write_text(json.dumps(report))


def load(fabric: Fabric, directory: Path) -> None:
    model: Any = fabric.setup_module(make_model(seed=9))
    optimizer: Any = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.5))
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
    reference = torch.load(directory / "reference.pt", weights_only=True)

    def equal() -> dict[str, bool]:
        loaded = full_state(model, optimizer)
        return {k: all(torch.equal(a, b) for a, b in zip(loaded[k], reference[k], strict=True)) for k in loaded}

    fabric.load(directory / "sharded", state)
    report = {"world_size": fabric.world_size, "step": state["step"], "lr": optimizer.param_groups[0]["lr"]}
    report["equal"] = equal()
    fresh: Any = make_model(seed=5)
    with torch.no_grad():  # scrambled again, so that the resume below has to restore every value
        for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
            p.copy_(torch.distributed.tensor.distribute_tensor(q, p.device_mesh, p.placements))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resumed by another number of processes: the RNG states are not
        report["resumed_step"] = RunCheckpoints(fabric, directory / "run", signals=()).resume(
            {"model": model, "optimizer": optimizer}
        )
    report["resumed_equal"] = equal()
    (directory / f"load-rank{fabric.global_rank}.json").write_text(json.dumps(report))


def main() -> None:
    mode, devices, directory = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    plugins = [AsyncCheckpointIO()] if mode == "save" else None
    fabric = Fabric(
        accelerator="cpu", devices=devices, strategy=spec("fsdp", auto_wrap_policy={Block}), plugins=plugins
    )
    fabric.launch()
    (save if mode == "save" else load)(fabric, directory)


if __name__ == "__main__":
    main()
