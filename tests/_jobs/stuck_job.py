"""Two ranks through SubprocessScriptLauncher (this script runs again as local rank 1), one of them misbehaving.

Usage: python stuck_job.py MODE
MODE:
  mismatch   both ranks all_reduce, rank 0 a tensor of shape (2,), rank 1 of shape (3,)
  exit       rank 1 waits in a barrier that rank 0 never reaches; rank 0 returns normally
  late       rank 1 joins rank 0's all_reduce only after a few seconds (rank 0 waits in it meanwhile)
"""

from __future__ import annotations

import sys
import time

import torch

from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import connect_to_cpus


def main(mode: str) -> None:
    environment = LightningEnvironment()
    strategy = connect_to_cpus(ParallelStrategy(), cluster_environment=environment)
    SubprocessScriptLauncher(environment, num_processes=2, num_nodes=1).launch(strategy.setup_environment)
    rank = strategy.global_rank
    if mode == "mismatch":
        try:
            strategy.all_reduce(torch.ones(2 + rank), reduce_op="sum")
        except ValueError as error:
            print(f"rank {rank} raised: {error}", flush=True)
            strategy.barrier()  # the process group is still usable, and both ranks have printed
            print(f"rank {rank} met the other rank after the error", flush=True)
            raise
    elif mode == "exit":
        if rank == 1:
            strategy.barrier()  # rank 0 never comes
        print(f"rank {rank} returns", flush=True)
    elif mode == "late":
        strategy.all_reduce(torch.ones(1))  # the shapes are agreed: the stuck call below is the reduction itself
        if rank == 1:
            time.sleep(6)
        total = strategy.all_reduce(torch.ones(1), reduce_op="sum")  # LATE_LINE
        print(f"rank {rank} reduced {total.item()}", flush=True)
        store = torch.distributed.distributed_c10d._get_default_store()
        group = torch.distributed.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        print(f"rank {rank} timeouts after the rendezvous: {group.options._timeout} {store.timeout}", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1])
