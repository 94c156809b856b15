"""A training script that survives a restart with plain ``fabric.save``/``fabric.load`` to one file.

Usage: fabric-core run --devices 2 --strategy ddp ... restart_job.py OUTDIR STEPS EVERY [SLEEP]
   or: torchrun --nproc-per-node 2 ... restart_job.py OUTDIR STEPS EVERY [SLEEP]

Deterministic on CPU: fixed seed, each step's batch derived from (step, rank), so a run that resumes from
OUTDIR/ckpt.pt ends with the same parameters as one that never stopped. While it trains, each rank keeps
OUTDIR/progress<rank> at ``PID STEP RESTART_COUNT`` (replaced atomically) for a test to read, and writes
OUTDIR/attempt<rank>-<TORCHELASTIC_RESTART_COUNT> with the step it resumed from and the seconds from the
process start to its first step. At the end rank 0 writes the parameters to OUTDIR/final.pt.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

_started = time.time()

import torch  # noqa: E402

from fabric_core import Fabric  # noqa: E402

outdir, steps, every = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "none")

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
fabric = Fabric(accelerator="cpu", strategy="ddp", devices=2)
if os.environ.get("FABRIC_CORE_CLI_USED") != "1":  # `fabric-core run` started the processes already
    fabric.launch()
rank = fabric.global_rank
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
model, optimizer = fabric.setup(model, optimizer)
state = {"model": model, "optimizer": optimizer, "step": 0}
checkpoint = outdir / "ckpt.pt"
if checkpoint.exists():
    fabric.load(checkpoint, state)
first = int(state["step"])


def progress(step: int) -> None:
    tmp = outdir / f".progress{rank}"
    tmp.write_text(f"{os.getpid()} {step} {restart}")
    os.replace(tmp, outdir / f"progress{rank}")


for step in range(first, steps):
    progress(step)
    if step == first:
        (outdir / f"attempt{rank}-{restart}").write_text(f"{first} {time.time() - _started} {time.time()}")
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 16, generator=generator)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    optimizer.zero_grad()
    fabric.backward(loss)
    optimizer.step()
    if (step + 1) % every == 0:
        state["step"] = step + 1
        fabric.save(checkpoint, state)
    if pause:
        time.sleep(pause)
progress(steps)
if rank == 0:
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, outdir / "final.pt")
