"""Save a training run, stop it, resume it from the checkpoint, and check the result against an unbroken run.

The checkpoint holds the model, the optimizer, the LR scheduler, the step and every process's random number
generator state, so a resumed run ends with exactly the parameters an uninterrupted run would have:

    python examples/checkpoint_resume.py --stop-after 25            # "crashes" after step 25; saved at 20
    python examples/checkpoint_resume.py --resume --verify          # continues from step 20 to 40, compares

The same works on several processes, with any installed strategy (run both commands the same way):

    fabric-core run --accelerator cpu --devices 2 --strategy ddp examples/checkpoint_resume.py --stop-after 25
    fabric-core run --accelerator cpu --devices 2 --strategy ddp examples/checkpoint_resume.py --resume --verify

Under ddp the checkpoint is one file; under fsdp and deepspeed it is a folder (each process writes its shards).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import torch
from torch import nn

from fabric_core import Fabric
from fabric_core.utilities import GatheredParameters

SEED = 42


def batch_for(step: int, rank: int, batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of one process at one step: a pure function of both, so resuming needs no data-loader state.

    (With a ``DataLoader``, save the epoch and the batch index instead, and skip that many batches.)
    """
    # The rank goes into the low 32 bits: torch's CPU generator keeps only those of a seed, so ``rank << 32``
    # would give every process the same batch.
    generator = torch.Generator().manual_seed(step * 1_000_003 + rank)
    inputs = torch.randn(batch_size, 16, generator=generator)
    targets = torch.sin(inputs[:, :8]).sum(1, keepdim=True) - inputs[:, 8:].pow(2).mean(1, keepdim=True)
    return inputs.to(device), targets.to(device)


def build(fabric: Fabric, args: argparse.Namespace) -> tuple[Any, Any, torch.optim.lr_scheduler.LambdaLR]:
    """A freshly initialised model, its AdamW optimizer and a warm-up + cosine LR schedule over ``--steps``."""
    fabric.seed_everything(SEED, verbose=False)
    with fabric.init_module():
        model = nn.Sequential(
            nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
        )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    total: int = args.steps
    warmup = max(1, total // 10)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    model, optimizer = fabric.setup(model, optimizer)
    return model, optimizer, scheduler


def rng_states(fabric: Fabric) -> torch.Tensor:
    """Every process's torch RNG state, one row each (dropout draws from it)."""
    states: torch.Tensor = fabric.all_gather(torch.get_rng_state())
    return states.reshape(fabric.world_size, -1)


def train(fabric: Fabric, args: argparse.Namespace, state: dict[str, Any], stop: int, save_to: str | None) -> None:
    """Train from ``state["step"]`` up to ``stop``, saving every ``--save-every`` steps and at ``--steps``."""
    model, optimizer, scheduler = state["model"], state["optimizer"], state["scheduler"]
    model.train()
    losses: list[torch.Tensor] = []
    while state["step"] < stop:
        inputs, targets = batch_for(state["step"], fabric.global_rank, args.batch_size, fabric.device)
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        # Naming the model matters only where several are set up under DeepSpeed (as with --verify).
        fabric.backward(loss, model=model)
        optimizer.step()
        scheduler.step()
        losses.append(loss.detach())
        state["step"] += 1
        step = state["step"]
        if step % args.log_every == 0:
            average = fabric.all_reduce(torch.stack(losses).mean()).item()
            losses.clear()
            fabric.print(f"step {step:4d}  loss {average:.5f}")
        if save_to is not None and (step % args.save_every == 0 or step == args.steps):
            state["rng"] = rng_states(fabric)
            fabric.save(save_to, state)
            fabric.print(f"step {step:4d}  saved {save_to}")


def whole_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Copies of the model's parameters, whole even where a strategy shards them (all processes call this)."""
    with GatheredParameters(list(model.parameters())):
        return [p.detach().float().cpu().clone() for p in model.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="Length of the whole run (and of the LR schedule).")
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--stop-after", type=int, default=None, help="Stop after this step, as if interrupted.")
    parser.add_argument("--resume", action="store_true", help="Continue from the checkpoint.")
    parser.add_argument("--verify", action="store_true", help="Compare with an unbroken run in this process.")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--out", default=os.path.join("runs", "checkpoint_resume"))
    args = parser.parse_args()
    checkpoint = os.path.join(args.out, "checkpoint")

    # No arguments: `fabric-core run --devices 2 --strategy ...` decides (one CPU process without it).
    fabric = Fabric()
    model, optimizer, scheduler = build(fabric, args)
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "step": 0, "rng": None}
    if args.resume:
        if not os.path.exists(checkpoint):
            sys.exit(f"No checkpoint at {checkpoint}: run without --resume first.")
        fabric.load(checkpoint, state)
        rng = state["rng"].reshape(-1, torch.get_rng_state().numel())
        if len(rng) != fabric.world_size:
            sys.exit(f"The checkpoint was saved by {len(rng)} processes; resume it with as many.")
        # A copy: torch.set_rng_state crashes on a view that starts inside its storage (torch 2.13, CPU).
        torch.set_rng_state(rng[fabric.global_rank].cpu().clone())
        fabric.print(f"resumed from {checkpoint} at step {state['step']} (lr {scheduler.get_last_lr()[0]:.5f})")

    stop = args.steps if args.stop_after is None else min(args.stop_after, args.steps)
    train(fabric, args, state, stop, save_to=checkpoint)
    if state["step"] < args.steps:
        fabric.print(f"stopped after step {stop}; continue with --resume")
        return
    fabric.print(
        f"finished {args.steps} steps, strategy {type(fabric.strategy).__name__}, world size {fabric.world_size}"
    )

    if args.verify:
        resumed = whole_parameters(model)
        model, optimizer, scheduler = build(fabric, args)
        straight = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "step": 0}
        train(fabric, args, straight, args.steps, save_to=None)
        expected = whole_parameters(model)
        local = max((a - b).abs().max().item() for a, b in zip(resumed, expected))
        difference = fabric.all_reduce(torch.tensor(local, device=fabric.device), reduce_op="max").item()
        if difference != 0.0:
            fabric.print(f"MISMATCH: resumed and uninterrupted parameters differ by up to {difference:.3e}")
            sys.exit(1)
        fabric.print(f"OK: the resumed run ends with the same parameters as an uninterrupted run of {args.steps} steps")


if __name__ == "__main__":
    main()
