"""Tensor parallelism: a feed-forward block whose Linear layers are split across the processes.

The block is the one of a Llama-style transformer, ``w2(silu(w1(x)) * w3(x))``. ``parallelize`` hands it to
``torch.distributed.tensor.parallel.parallelize_module`` over the tensor-parallel dimension of the device mesh
that fabric-core's ``model_parallel`` strategy builds: ``w1`` and ``w3`` are split by output features
(``ColwiseParallel``: each process holds some rows of the weight and computes those hidden units), ``w2`` by
input features (``RowwiseParallel``: each process multiplies its part of the hidden vector and the partial
results are summed across the processes). Every process reads the same batch; one forward pass needs all of them.

    fabric-core run --accelerator cpu --devices 2 examples/tensor_parallel.py

The script then trains the same block, from the same seed, on the same batches, without any parallelism in each
process, gathers the parallel weights whole, and prints the largest difference: ``OK`` when it is within float
tolerance, exit code 1 when not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from fabric_core import Fabric, spec

DIM = 16
HIDDEN = 64
TOLERANCE = 1e-5


class FeedForward(nn.Module):
    """The SwiGLU feed-forward block of a Llama-style transformer layer."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


def make_model(seed: int) -> FeedForward:
    torch.manual_seed(seed)  # the same initial weights in the parallel model and in the reference
    return FeedForward(DIM, HIDDEN)


def parallelize(model: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
    """Split ``w1`` and ``w3`` by rows and ``w2`` by columns over the tensor-parallel processes."""
    plan = {"w1": ColwiseParallel(), "w2": RowwiseParallel(), "w3": ColwiseParallel()}
    return parallelize_module(model, device_mesh["tensor_parallel"], plan)


def batches(steps: int, batch_size: int, seed: int) -> list[tuple[Tensor, Tensor]]:
    """Synthetic regression data: the target is a fixed random linear map of the input plus a little noise."""
    generator = torch.Generator().manual_seed(seed)
    target_map = torch.randn(DIM, DIM, generator=generator) / DIM**0.5
    out = []
    for _ in range(steps):
        x = torch.randn(batch_size, DIM, generator=generator)
        out.append((x, x @ target_map + 0.01 * torch.randn(batch_size, DIM, generator=generator)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="rank 0 saves the trained weights, gathered whole")
    args = parser.parse_args()

    fabric = Fabric(accelerator="cpu", strategy=spec("model_parallel", parallelize_fn=parallelize))
    model = fabric.setup_module(make_model(args.seed))
    # The optimizer is made after setup_module, from the parallelized parameters (DTensors), as for FSDP.
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=args.lr))
    assert not isinstance(optimizer, tuple)  # one optimizer in, one out
    reference = make_model(args.seed)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=args.lr)

    for name in ("w1", "w2"):
        weight = getattr(model.module, name).weight
        assert isinstance(weight, DTensor)
        (rows, cols), (all_rows, all_cols) = weight.to_local().shape, weight.shape
        # One write per line: two processes share the output, and a line written in pieces can be split.
        sys.stdout.write(f"rank {fabric.global_rank}: {name} local shard {rows}x{cols} of {all_rows}x{all_cols}\n")
        sys.stdout.flush()

    # Every process draws the same batches: a tensor-parallel group works on one batch together.
    losses = []
    for x, y in batches(args.steps, args.batch_size, args.seed):
        x, y = x.to(fabric.device), y.to(fabric.device)
        loss = F.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())

        ref_loss = F.mse_loss(reference(x), y)
        torch.autograd.backward(ref_loss)
        ref_optimizer.step()
        ref_optimizer.zero_grad()
    fabric.print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} in {args.steps} steps")

    # full_tensor() gathers a DTensor's shards from every process, so every process must call it.
    gathered = {
        name: (parameter.full_tensor() if isinstance(parameter, DTensor) else parameter).detach().cpu()
        for name, parameter in model.module.named_parameters()
    }
    if args.out is not None and fabric.is_global_zero:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        torch.save(gathered, args.out)
    reference_weights = dict(reference.named_parameters())
    difference = max(float((gathered[name] - reference_weights[name].detach()).abs().max()) for name in gathered)
    verdict = "OK" if difference <= TOLERANCE else "MISMATCH"
    line = f"rank {fabric.global_rank}: {verdict}: largest difference from the single-process model {difference:.2e}"
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if difference > TOLERANCE:
        sys.exit(1)


if __name__ == "__main__":
    main()
