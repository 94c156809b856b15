"""Two ranks through SubprocessScriptLauncher, started with whatever environment the test gives.

Usage: python env_job.py
"""

from __future__ import annotations

import torch

from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import connect_to_cpus

if __name__ == "__main__":
    environment = LightningEnvironment()
    strategy = connect_to_cpus(ParallelStrategy(), cluster_environment=environment)
    SubprocessScriptLauncher(environment, num_processes=2, num_nodes=1).launch(strategy.setup_environment)
    total = strategy.all_reduce(torch.ones(1), reduce_op="sum")
    print(f"rank {strategy.global_rank} reduced {total.item()}", flush=True)
