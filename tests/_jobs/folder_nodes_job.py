"""One process of a job of 2 "nodes" of 1 process each; each node's folder is OUTDIR/<MODE>/node<N>, or one
folder for both (MODE "shared"). Started by the test once per node with NODE_RANK, LOCAL_RANK=0, WORLD_SIZE=2,
MASTER_ADDR and MASTER_PORT set, as a launcher on each node would. Writes rank<N>.json in its folder.

Usage: python folder_nodes_job.py FOLDER
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from fabric_core.io.atomic import write_folder_collectively
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import connect_to_cpus
from fabric_core.utilities.distributed import is_shared_filesystem


def main(folder: str) -> None:
    os.chdir(folder)  # the checkpoint path is relative: each node's own disk, or the one shared folder
    strategy = connect_to_cpus(ParallelStrategy(), num_processes=1)
    strategy.num_nodes = 2
    strategy.setup_environment()
    rank = strategy.global_rank
    started = time.monotonic()
    report: dict[str, object] = {"rank": rank, "node": strategy.node_rank, "shared": is_shared_filesystem(strategy)}
    report["check_seconds"] = round(time.monotonic() - started, 2)
    report["shared_short_timeout"] = is_shared_filesystem(strategy, "ckpt", timeout=0.2)

    def write(temp: Path) -> None:
        temp.mkdir(exist_ok=True)
        (temp / f"rank{rank}.txt").write_text(f"saved by rank {rank}")

    try:
        write_folder_collectively(strategy, "ckpt", write, "nodes-job")
    except OSError as err:  # a folder of other files at the path: refused on every rank before anything is written
        report["refused"] = f"{type(err).__name__}: {err}"
    report["leftovers"] = sorted(p.name for p in Path().iterdir() if p.name.startswith("."))
    Path(f"rank{rank}.json").write_text(json.dumps(report))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
