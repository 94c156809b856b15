"""Two ranks load a sharded folder that another save replaces between the two ranks' opens of it.

Rank 0 opens the folder of version 1; then (rank 1 acting as the other process) version 2 is swapped in
before rank 1 opens it. Whether the replaced folder is kept (rank 0 could read version 1 to the end) or
deleted (rank 0's reads fail), both ranks must load version 2. Writes OUTDIR/rank<N>.json.
Usage: python fsdp_replace_job.py OUTDIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _common import Block, make_model

from fabric_core import Fabric, spec
from fabric_core.io import atomic, replace
from fabric_core_fsdp import _state


def _wait_for(flag: Path) -> None:
    deadline = time.monotonic() + 60
    while not flag.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{flag} never appeared")
        time.sleep(0.01)


def _fill(model: torch.nn.Module, value: float) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)


def load_while_replaced(fabric: Fabric, model: Any, out: Path, keep_replaced: bool) -> dict[str, Any]:
    """Save versions 1 and 2, then load the path while version 2 replaces version 1 between the ranks' opens."""
    rank, scenario = fabric.global_rank, "kept" if keep_replaced else "deleted"
    target, second = out / f"ckpt-{scenario}", out / f"second-{scenario}"
    opened, replaced = out / f"rank0-opened-{scenario}", out / f"replaced-{scenario}"
    for path, version in ((target, 1), (second, 2)):
        _fill(model, float(version))
        fabric.save(path, {"model": model, "version": version})
    _fill(model, 0.0)
    opens = 0
    real_open = _state.open_folder

    def open_folder(path: Path) -> Any:
        nonlocal opens
        opens += 1
        if opens > 1:
            return real_open(path)
        if rank == 0:
            folder = real_open(path)
            opened.touch()
            _wait_for(replaced)
            return folder
        _wait_for(opened)
        # Another process's save, which swaps version 2 in. Kept: its removal of version 1 is held back, so
        # that rank 0 could read its folder whole and only the agreement between the ranks can tell.
        # Deleted: rank 0's opened folder is gone before rank 0 read a file of it.
        real_remove = replace._remove
        if keep_replaced:
            replace._remove = lambda path: None
        atomic.replace_path(second, target)
        replace._remove = real_remove
        replaced.touch()
        return real_open(path)

    _state.open_folder = open_folder
    try:
        state: dict[str, Any] = {"model": model, "version": 0}
        fabric.load(target, state)
    finally:
        _state.open_folder = real_open
    values = {float(v) for p in model.parameters() for v in p.to_local().flatten().tolist()}
    return {"version": state["version"], "values": sorted(values), "opens": opens}


def main(fabric: Fabric, outdir: str) -> None:
    model: Any = fabric.setup_module(make_model())
    out = Path(outdir)
    report = {
        "kept": load_while_replaced(fabric, model, out, keep_replaced=True),
        "deleted": load_while_replaced(fabric, model, out, keep_replaced=False),
    }
    (out / f"rank{fabric.global_rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    strategy = spec("fsdp", start_method="spawn", auto_wrap_policy={Block})
    Fabric(accelerator="cpu", devices=2, strategy=strategy).launch(main, sys.argv[1])
