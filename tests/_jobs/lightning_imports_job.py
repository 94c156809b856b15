"""A Lightning program, unchanged, for zero-edit mode: it imports only Lightning's names.

Usage: python -m fabric_core.lightning_imports lightning_imports_job.py OUTDIR LAUNCH
LAUNCH: single (1 process), ddp (2 processes, this script run again), ddp_spawn / ddp_fork (2 workers of
``fabric.launch(function)``), cli (``Fabric()``: ``fabric-core run`` chose everything).
Each rank writes OUTDIR/rank<global rank>.json with what it saw of the three names.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
import lightning_fabric
from lightning.fabric.strategies import Strategy


def report(fabric: Any, outdir: str) -> None:
    import torch

    import fabric_core

    total = fabric.all_reduce(torch.tensor(float(fabric.global_rank + 1)), reduce_op="sum")
    data = {
        "rank": fabric.global_rank,
        "world_size": fabric.world_size,
        "fabric_class": f"{type(fabric).__module__}.{type(fabric).__qualname__}",
        "is_fabric_core": isinstance(fabric, fabric_core.Fabric),
        "same_modules": lightning_fabric is fabric_core
        and L.fabric is fabric_core
        and importlib.import_module("lightning.fabric.fabric") is sys.modules["fabric_core.fabric"],
        "strategy": f"{type(fabric.strategy).__module__}.{type(fabric.strategy).__name__}",
        "strategy_is_lightning_strategy": isinstance(fabric.strategy, Strategy),
        "total": float(total.item()),
        "argv": sys.argv,
        "name": __name__,
        "path0": sys.path[0],
        "mode_env": os.environ.get("FABRIC_CORE_LIGHTNING_IMPORTS"),
    }
    Path(outdir, f"rank{fabric.global_rank}.json").write_text(json.dumps(data))


def work(fabric: Any, outdir: str) -> None:
    report(fabric, outdir)


if __name__ == "__main__":
    outdir, launch = sys.argv[1], sys.argv[2]
    if launch in ("ddp_spawn", "ddp_fork"):
        L.Fabric(accelerator="cpu", devices=2, strategy=launch).launch(work, outdir)
    else:
        options: dict[str, Any] = {
            "single": {"accelerator": "cpu", "devices": 1},
            "ddp": {"accelerator": "cpu", "devices": 2, "strategy": "ddp"},
            "cli": {},
        }[launch]
        fabric = L.Fabric(**options)
        if launch != "cli":  # under `fabric-core run` the processes exist already, and launch() is refused
            fabric.launch()
        report(fabric, outdir)
