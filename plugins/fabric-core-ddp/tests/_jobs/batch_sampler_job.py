"""Two DDP ranks set up loaders built on user batch samplers; each rank writes the batches it drew.

Usage: python batch_sampler_job.py OUTDIR (this script runs again as rank 1; each rank writes
OUTDIR/rank<N>.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from batch_sampler_setups import SEED, loaders  # the job folder is sys.path[0]
from torch.utils.data import DataLoader

from fabric_core import Fabric
from fabric_core.utilities.seed import seed_everything

if __name__ == "__main__":
    outdir = sys.argv[1]
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    seed_everything(SEED)
    drawn: dict[str, Any] = {}
    for name, loader in loaders().items():
        wrapped: DataLoader[Any] = fabric.setup_dataloaders(loader)
        drawn[name] = [batch.tolist() for batch in wrapped]
    Path(outdir, f"rank{fabric.global_rank}.json").write_text(json.dumps(drawn))
