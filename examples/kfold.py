"""K-fold cross-validation with Fabric: a fresh model and optimizer per fold, the folds' accuracies averaged.

The data is split into ``--folds`` parts; fold ``k`` trains on the others and validates on part ``k``. Each fold
builds its model and optimizer anew and sets them up with Fabric (``fabric.setup`` may be called many times), and
its validation accuracy is summed over all processes with ``all_reduce``, so every process computes the same
per-fold accuracies and the same average:

    python examples/kfold.py
    fabric-core run --accelerator cpu --devices 2 --strategy ddp examples/kfold.py

Every process prints its own result line (``rank N: mean accuracy ...``), to show that they agree.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from fabric_core import Fabric


def dataset(samples: int) -> TensorDataset:
    """Two interleaved half-moons in 2-D with noise: a classifier needs a non-linear boundary."""
    generator = torch.Generator().manual_seed(0)
    targets = torch.randint(0, 2, (samples,), generator=generator)
    angle = torch.rand(samples, generator=generator) * torch.pi
    x = torch.where(targets == 0, torch.cos(angle), 1 - torch.cos(angle))
    y = torch.where(targets == 0, torch.sin(angle), 0.5 - torch.sin(angle))
    points = torch.stack([x, y], 1) + 0.15 * torch.randn(samples, 2, generator=generator)
    return TensorDataset(points, targets)


def run_fold(fabric: Fabric, data: TensorDataset, train_idx: list[int], val_idx: list[int], epochs: int) -> float:
    """Train a fresh model on ``train_idx`` and return its accuracy on ``val_idx`` over all processes."""
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    model, optimizer = fabric.setup(model, optimizer)
    train, val = fabric.setup_dataloaders(
        DataLoader(Subset(data, train_idx), batch_size=32, shuffle=True),
        DataLoader(Subset(data, val_idx), batch_size=64),
    )
    for _ in range(epochs):  # each pass over `train` reshuffles (the sampler's epoch advances by itself)
        model.train()
        for inputs, targets in train:
            optimizer.zero_grad()
            fabric.backward(nn.functional.cross_entropy(model(inputs), targets))
            optimizer.step()
    model.eval()
    counts = torch.zeros(2, device=fabric.device)  # correct, seen
    with torch.no_grad():
        for inputs, targets in val:
            counts += torch.stack([(model(inputs).argmax(1) == targets).sum(), torch.tensor(len(targets))])
    total: Tensor = fabric.all_reduce(counts, reduce_op="sum")
    return float(total[0] / total[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=400)
    args = parser.parse_args()

    fabric = Fabric()
    fabric.seed_everything(42, verbose=False)  # the same seed everywhere: the folds are the same on every process
    data = dataset(args.samples)
    order = torch.randperm(len(data)).tolist()
    folds = [order[k :: args.folds] for k in range(args.folds)]
    accuracies = []
    for k in range(args.folds):
        train_idx = [i for j, fold in enumerate(folds) if j != k for i in fold]
        accuracy = run_fold(fabric, data, train_idx, folds[k], args.epochs)
        fabric.print(f"fold {k}: val accuracy {accuracy:.4f}")
        accuracies.append(accuracy)
    mean = sum(accuracies) / len(accuracies)
    # One write per line: print() writes the text and the newline separately, and unbuffered (PYTHONUNBUFFERED)
    # the other process's line can land between them.
    sys.stdout.write(f"rank {fabric.global_rank}: mean accuracy {mean:.6f} over {args.folds} folds\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
