"""A tiny GAN: two models, two optimizers, both set up with Fabric, each loss through ``fabric.backward``.

The generator learns to turn Gaussian noise into points of a 2-D target distribution (a Gaussian centred at
``(2, -1)``); the discriminator learns to tell its points from real ones. Each step updates the discriminator on
a real and a generated batch, then the generator through the discriminator's judgement, as DCGAN does:

    python examples/gan.py
    fabric-core run --accelerator cpu --devices 2 --strategy ddp examples/gan.py

At the end every process prints the mean of 2000 generated points, the losses, and a fingerprint of both
models' parameters: under ddp the processes' fingerprints are equal (gradients are averaged across them).
"""

from __future__ import annotations

import argparse
import hashlib
import sys

import torch
from torch import Tensor, nn

from fabric_core import Fabric

NOISE = 4
TARGET = torch.tensor([2.0, -1.0])


def real_batch(size: int, generator: torch.Generator) -> Tensor:
    return TARGET + 0.5 * torch.randn(size, 2, generator=generator)


def fingerprint(*models: nn.Module) -> str:
    """A short hash of every parameter's bytes: equal only if the parameters are bit-identical."""
    digest = hashlib.sha256()
    for model in models:
        for parameter in model.parameters():
            digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    fabric = Fabric()
    fabric.seed_everything(42, verbose=False)  # the same initial weights on every process
    generator = nn.Sequential(nn.Linear(NOISE, 32), nn.LeakyReLU(0.2), nn.Linear(32, 2))
    discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    opt_g = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))
    generator, opt_g = fabric.setup(generator, opt_g)
    discriminator, opt_d = fabric.setup(discriminator, opt_d)
    initial = [p.detach().clone() for p in generator.parameters()]

    # Each process draws its own data and noise (a different stream per rank), as a DistributedSampler would.
    data = torch.Generator().manual_seed(1000 + fabric.global_rank)
    bce = nn.BCEWithLogitsLoss()
    ones = torch.ones(args.batch_size, 1, device=fabric.device)
    zeros = torch.zeros(args.batch_size, 1, device=fabric.device)
    for step in range(args.steps):
        real = real_batch(args.batch_size, data).to(fabric.device)
        fake = generator(torch.randn(args.batch_size, NOISE, generator=data).to(fabric.device))

        # The discriminator: real points are 1, generated ones 0 (detached: this step leaves the generator alone).
        opt_d.zero_grad()
        loss_d_real = bce(discriminator(real), ones)
        fabric.backward(loss_d_real)
        loss_d_fake = bce(discriminator(fake.detach()), zeros)
        fabric.backward(loss_d_fake)
        opt_d.step()

        # The generator: make the discriminator call its points real.
        opt_g.zero_grad()
        loss_g = bce(discriminator(fake), ones)
        fabric.backward(loss_g)
        opt_g.step()
        if step % 200 == 0 or step == args.steps - 1:
            loss_d = (loss_d_real + loss_d_fake).item()
            fabric.print(f"step {step:4d}  loss_d {loss_d:.4f}  loss_g {loss_g.item():.4f}")

    with torch.no_grad():
        mean = generator(torch.randn(2000, NOISE, generator=data).to(fabric.device)).mean(0).cpu()
    moved = sum(float((p.detach() - q).norm()) for p, q in zip(generator.parameters(), initial))
    # One write per line: print() writes the text and the newline separately, and unbuffered (PYTHONUNBUFFERED)
    # the other process's line can land between them.
    sys.stdout.write(
        f"rank {fabric.global_rank}: generated mean ({mean[0]:.3f}, {mean[1]:.3f}) target (2.000, -1.000)"
        f"  loss_d {(loss_d_real + loss_d_fake).item():.4f}  loss_g {loss_g.item():.4f}"
        f"  generator moved {moved:.4f}  parameters {fingerprint(generator, discriminator)}\n"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
