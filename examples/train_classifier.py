"""Train a small image classifier on synthetic data with fabric-core.

Runs on CPU in seconds. The same script runs on one process or many, with any installed strategy:

    python examples/train_classifier.py
    fabric-core run --devices 2 --strategy ddp examples/train_classifier.py --epochs 3
    fabric-core run --devices 1 --precision bf16-mixed examples/train_classifier.py
    python examples/train_classifier.py --logger mlflow --progress   # needs fabric-core-mlflow
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabric_core import Fabric, Spec, spec

LOGGERS = ("csv", "tensorboard", "mlflow", "wandb")


def logger_spec(name: str, out: str) -> Spec:
    """The logger ``--logger`` names, writing under ``out`` (trackers other than csv are plugins)."""
    if name == "mlflow":  # MLFLOW_TRACKING_URI, when set, wins over the local store in `out`
        return spec("mlflow", root_dir=out, experiment_name="train_classifier")
    if name == "wandb":  # offline (no account needed) unless WANDB_MODE says otherwise
        return spec("wandb", save_dir=out, project="train_classifier", offline="WANDB_MODE" not in os.environ)
    return Spec(name, {"root_dir": out, "name": "logs"})  # spec(name, ...) cannot take a `name` option


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
    parser.add_argument("--logger", choices=LOGGERS, default="csv", help="Where metrics go (default: csv).")
    parser.add_argument("--progress", action="store_true", help="Show a progress bar (lines when piped); needs rich: pip install 'fabric-core[progress]'.")
    args = parser.parse_args()

    # No accelerator or strategy: `fabric-core run --devices 2 --strategy ddp ...` decides (one CPU process without).
    callbacks = [spec("progress", force=True)] if args.progress else []
    fabric = Fabric(loggers=logger_spec(args.logger, args.out), callbacks=callbacks)
    fabric.seed_everything(42)
    if args.logger != "csv":  # the CSV logger, as Lightning's, records no hyperparameters
        fabric.logger.log_hyperparams({k: v for k, v in vars(args).items() if k not in ("out", "progress")})

    train = DataLoader(make_dataset(2048), batch_size=args.batch_size, shuffle=True)
    val = DataLoader(make_dataset(512, seed=1), batch_size=256)
    train, val = fabric.setup_dataloaders(train, val)

    with fabric.init_module():
        model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)

    step = 0
    fabric.call("on_train_start", total_steps=args.epochs * len(train), total_epochs=args.epochs)
    for epoch in range(args.epochs):
        fabric.call("on_train_epoch_start", epoch=epoch)
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
        fabric.log("val/accuracy", accuracy, step=step)
        fabric.print(f"epoch {epoch}: loss {loss.item():.4f}  val accuracy {accuracy.item():.3f}")
    fabric.call("on_train_end")

    checkpoint = os.path.join(args.out, "checkpoint.pt")
    fabric.save(checkpoint, {"model": model, "optimizer": optimizer, "step": step})
    if hasattr(fabric.logger, "log_artifact"):  # mlflow and wandb keep the checkpoint with the run
        fabric.barrier()  # rank 0 uploads what every rank finished writing
        fabric.logger.log_artifact(checkpoint)
    fabric.logger.finalize("success")
    fabric.print(f"world size {fabric.world_size}, strategy {type(fabric.strategy).__name__}, checkpoint in {args.out}")


if __name__ == "__main__":
    main()
