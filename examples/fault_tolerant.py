"""A run that survives kills, restarts and preemptions, and ends bit-identical to an uninterrupted run.

One call at the top restores the newest complete checkpoint (or does nothing on a fresh start); one call at the
end of each step saves every ``--every`` steps and, after SIGTERM, saves at once and exits with code 143. Kill
the run any way you like and start the same command again: it continues where the last checkpoint left off.

    python examples/fault_tolerant.py --steps 60 --every 10 --dir runs/fault_tolerant
    fabric-core run --accelerator cpu --devices 2 --strategy ddp examples/fault_tolerant.py --dir runs/ft2

At the end rank 0 prints ``final digest: <sha256 of the parameters>``, the same for every run of the same
options and number of processes however often it was interrupted. The batches come from a shuffled
``DataLoader`` set up by ``fabric.setup_dataloaders`` (split across processes by a ``DistributedSampler``);
the loader is part of the checkpointed state, so a resumed run continues the epoch with the very batch the
interrupted one would have drawn next. The augmentation noise is drawn from torch's, numpy's and Python's
global generators, which the run checkpoints save and restore per rank.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import time
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabric_core import Fabric, RunCheckpoints
from fabric_core.utilities import GatheredParameters

SEED = 1234


def dataset(size: int = 256) -> TensorDataset:
    """A fixed regression problem: the same samples in every process and every run."""
    generator = torch.Generator().manual_seed(SEED)
    inputs = torch.randn(size, 16, generator=generator)
    targets = torch.sin(inputs[:, :8]).sum(1, keepdim=True) - inputs[:, 8:].pow(2).mean(1, keepdim=True)
    return TensorDataset(inputs, targets)


def augment(inputs: torch.Tensor) -> torch.Tensor:
    """Noise from the three global generators on top of a batch."""
    noise = torch.from_numpy(np.random.standard_normal(inputs.shape).astype(np.float32)).to(inputs.device)
    return inputs + 0.01 * noise * random.random() + 0.01 * torch.randn(inputs.shape).to(inputs.device)


def digest(model: nn.Module) -> str:
    """sha256 of the concatenated bytes of the parameters (gathered whole where a strategy shards them)."""
    with GatheredParameters(list(model.parameters())):
        # Copies: a numpy view would pin the storage that FSDP frees when it shards the parameters again.
        whole = [p.detach().cpu().clone() for p in model.parameters()]
    return hashlib.sha256(b"".join(t.numpy().tobytes() for t in whole)).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="Length of the whole run.")
    parser.add_argument("--every", type=int, default=10, help="Save a checkpoint every this many steps.")
    parser.add_argument("--dir", default="runs/fault_tolerant", help="The run directory (checkpoints).")
    parser.add_argument(
        "--step-seconds", type=float, default=0.0, help="Sleep this long after each step: time to kill it by hand."
    )
    args = parser.parse_args()

    torch.use_deterministic_algorithms(True)
    fabric = Fabric()  # `fabric-core run --devices N --strategy ...` decides; one CPU process without it
    fabric.seed_everything(SEED, verbose=False)
    with fabric.init_module():
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(dataset(), batch_size=16, shuffle=True))
    # The loader's position (epoch, batches drawn, shuffle seed) is saved and restored with the rest.
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "data": loader}

    ckpt = RunCheckpoints(fabric, args.dir, every=args.every, keep_last=2)
    step = ckpt.resume(state) or 0
    fabric.print(f"resumed at step {step}" if step else "starting at step 0", flush=True)

    model.train()
    while step < args.steps:
        for inputs, targets in loader:  # a new epoch, or the rest of the one a checkpoint was saved in
            loss = nn.functional.mse_loss(model(augment(inputs)), targets)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            step += 1
            fabric.print(f"step {step} loss {loss.item():.5f}", flush=True)
            ckpt.step_end(step, state)  # saves every --every steps; after SIGTERM saves now and exits
            time.sleep(args.step_seconds)
            if step == args.steps:
                break

    final = digest(model)
    fabric.print(f"final digest: {final}")


if __name__ == "__main__":
    main()
