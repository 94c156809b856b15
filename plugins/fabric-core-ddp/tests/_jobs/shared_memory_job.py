"""ddp_spawn on two CPU processes with a tensor and a module passed to `launch`; prints what was shared.

Usage: python shared_memory_job.py LIBRARY (fabric_core or lightning_fabric). Prints one JSON line: whether
the parent's tensor is in shared memory after launch, what the workers wrote into it, and whether each
worker's module parameters were shared.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import torch


def work(fabric: Any, board: torch.Tensor, module: torch.nn.Module) -> None:
    rank = fabric.global_rank
    board[rank] = rank + 1.0  # in place: seen by the parent where the tensor is shared
    shared = any(p.is_shared() for p in module.parameters())
    fabric.barrier()
    flags = fabric.all_gather(torch.tensor([int(shared)]))
    board[2] = float(flags.sum())


if __name__ == "__main__":
    library = importlib.import_module(sys.argv[1])
    fabric = library.Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    board = torch.zeros(3)
    module = torch.nn.Linear(2, 2)
    fabric.launch(work, board, module)
    shared = board.is_shared()
    print(json.dumps({"board_is_shared": shared, "board": board[:2].tolist(), "ranks_sharing_params": board[2].item()}))
