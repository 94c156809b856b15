"""Two processes through SubprocessScriptLauncher: this script runs again as local rank 1.

Usage: python popen_job.py MODE OUTDIR   (or python -m popen_job MODE OUTDIR)
MODE: ok (report the environment and an all_reduce), fail0 / fail1 (that rank raises while the other
waits in a collective), sleep (both ranks sleep until killed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import connect_to_cpus

ENV_NAMES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS")


def main(mode: str, outdir: str) -> None:
    environment = LightningEnvironment()
    strategy = connect_to_cpus(ParallelStrategy(), cluster_environment=environment)
    SubprocessScriptLauncher(environment, num_processes=2, num_nodes=1).launch(strategy.setup_environment)
    rank = strategy.global_rank
    Path(outdir, f"pid{rank}").write_text(str(os.getpid()))
    while mode == "sleep":
        time.sleep(0.2)
    if mode == f"fail{rank}":
        strategy.barrier()
        raise RuntimeError(f"rank {rank} failed on purpose")
    if mode.startswith("fail"):
        strategy.barrier()
        strategy.all_reduce(torch.ones(1))  # never completes: the other rank is gone
        return
    total = strategy.all_reduce(torch.tensor([rank + 1.0]), reduce_op="sum")
    report = {
        "rank": rank,
        "env": {name: os.environ.get(name) for name in ENV_NAMES},
        "sum": total.tolist(),
        "main_spec": getattr(sys.modules["__main__"].__spec__, "name", None),
    }
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
