"""Train a small image classifier on synthetic data with fabric-core.

Runs on CPU in seconds. The same script runs on one process or many, with any installed strategy:

    python examples/train_classifier.py
    fabric-core run --devices 2 --strategy ddp examples/train_classifier.py --epochs 3
    fabric-core run --devices 1 --precision bf16-mixed examples/train_classifier.py
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabric_core import Fabric
from fabric_core.loggers import CSVLogger


def make_dataset(num_samples: int, num_classes: int = 4, size: int = 8, seed: int = 0) -> TensorDataset:
    """Noisy 1-channel images: each class is a fixed random template; the task is to tell them apart.

    The templates are the same for every split; ``seed`` draws the labels and the noise.
    """
    templates = torch.randn(num_classes, 1, size, size, generator=torch.Generator().manual_seed(1234))
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (num_samples,), generator=generator)
    images = templates[labels] + 2.0 * torch.randn(num_samples, 1, size, size, generator=generator)
    return TensorDataset(images, labels)


class Classifier(nn.Module):
    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()
        )
        self.head = nn.Linear(32 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--out", default=os.path.join("runs", "classifier"))
    args = parser.parse_args()

    # No arguments: `fabric-core run --devices 2 --strategy ddp ...` decides (one CPU process without it).
    fabric = Fabric(loggers=CSVLogger(root_dir=args.out, name="logs"))
    fabric.seed_everything(42)

    train = DataLoader(make_dataset(2048), batch_size=args.batch_size, shuffle=True)
    val = DataLoader(make_dataset(512, seed=1), batch_size=256)
    train, val = fabric.setup_dataloaders(train, val)

    with fabric.init_module():
        model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)

    step = 0
    for epoch in range(args.epochs):
        model.train()
        for images, labels in train:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            if step % 20 == 0:
                fabric.log("train/loss", fabric.all_reduce(loss.detach()), step=step)
            step += 1
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, labels in val:
                correct += (model(images).argmax(1) == labels).sum()
                total += labels.numel()
        accuracy = fabric.all_reduce(correct.float(), reduce_op="sum") / fabric.all_reduce(
            torch.tensor(float(total)), reduce_op="sum"
        )
        fabric.print(f"epoch {epoch}: loss {loss.item():.4f}  val accuracy {accuracy.item():.3f}")

    fabric.save(os.path.join(args.out, "checkpoint.pt"), {"model": model, "optimizer": optimizer, "step": step})
    fabric.logger.finalize("success")
    fabric.print(f"world size {fabric.world_size}, strategy {type(fabric.strategy).__name__}, checkpoint in {args.out}")


if __name__ == "__main__":
    main()
