"""A one-process training job with run checkpoints and one logger, for testing that a logger resumes its run.

Run it twice with the same directory: the first run is interrupted, the second resumes from the newest
checkpoint and should log into the same run (a logger's ``run_identity`` / ``reattach``)::

    python -m fabric_core.testing.resumable_job DIR csv '{"root_dir": "DIR/logs"}' --steps 9 --every 3 --kill-at 5
    python -m fabric_core.testing.resumable_job DIR csv '{"root_dir": "DIR/logs"}' --steps 9 --every 3

Step ``i`` (counting from 0) logs ``{"loss": ..., "step_value": i}`` at ``step=i``; a checkpoint is saved after
every ``--every`` steps and after the last one. ``--kill-at K`` flushes the logger after step ``K - 1`` and
SIGKILLs the process (what the tracker holds past the last checkpoint is then logged again on resume);
``--term-at K`` sends SIGTERM instead (every rank to itself), which saves a checkpoint at ``K`` and exits with
code 143; ``--steps`` alone ends cleanly with ``finalize("success")``. ``--devices 2`` runs ddp, launched with
``fabric-core run --accelerator cpu --devices 2 <this file> ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from typing import Any

import torch

from fabric_core import Fabric, RunCheckpoints, spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", help="The run directory (checkpoints).")
    parser.add_argument("logger", help="The logger's registered name (csv, tensorboard, mlflow, wandb, ...).")
    parser.add_argument("options", help="The logger's options, a JSON object.")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--every", type=int, required=True)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--term-at", type=int, default=None)
    parser.add_argument("--devices", type=int, default=1, help="More than 1: ddp, under `fabric-core run`.")
    args = parser.parse_args()

    # Fabric resolves a spec by name; its `loggers` annotation names only logger objects.
    logger: Any = spec(args.logger, **json.loads(args.options))
    strategy = "ddp" if args.devices > 1 else "auto"
    fabric = Fabric(accelerator="cpu", devices=args.devices, strategy=strategy, loggers=logger)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    state = {"model": model, "optimizer": optimizer}
    ckpt = RunCheckpoints(fabric, args.directory, every=args.every, keep_last=2, signals=(signal.SIGTERM,))
    step = ckpt.resume(state) or 0
    print(f"starting at step {step}", flush=True)
    while step < args.steps:
        loss = model(torch.ones(8, 4)).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        fabric.log_dict({"loss": loss.item(), "step_value": float(step)}, step=step)
        step += 1
        if step == args.kill_at:
            for logger in fabric.loggers:
                logger.save()
            os.kill(os.getpid(), signal.SIGKILL)
        if step == args.term_at:
            os.kill(os.getpid(), signal.SIGTERM)
        ckpt.step_end(step, state)
    if step % args.every:
        ckpt.save(step, state)
    for logger in fabric.loggers:
        logger.finalize("success")
    print(f"finished at step {step}", flush=True)


if __name__ == "__main__":
    main()
