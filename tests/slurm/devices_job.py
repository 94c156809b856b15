"""One task of an ``srun`` job: ``Fabric()`` with every argument left at its default, then one all-reduce.

Each rank prints one line with what ``Fabric()`` decided and where the ranks met, and the sum of ``rank + 1``
over the job (3 for two ranks), which only a real process group gives.

Usage: srun --ntasks-per-node=2 python devices_job.py
"""

from __future__ import annotations

import torch

from fabric_core import Fabric
from fabric_core.strategies.parallel import ParallelStrategy

if __name__ == "__main__":
    fabric = Fabric()
    fabric.launch()
    strategy = fabric.strategy
    assert isinstance(strategy, ParallelStrategy), f"Fabric() chose {type(strategy).__name__}, not a parallel strategy"
    environment = strategy.cluster_environment
    assert environment is not None
    total = fabric.all_reduce(torch.tensor(float(fabric.global_rank + 1)), reduce_op="sum")
    print(
        f"rank {fabric.global_rank} of {fabric.world_size}: local {fabric.local_rank}, node {fabric.node_rank}, "
        f"strategy {type(strategy).__name__}, devices {len(strategy.parallel_devices or [])}, "
        f"environment {type(environment).__name__}, main {environment.main_address}:{environment.main_port}, "
        f"sum {total.item():g}",
        flush=True,
    )
