"""Train a LightningModule-shaped model with Fabric: ``self.log``, ``self.optimizers()`` and hooks via ``fabric.call``.

Code written for Lightning keeps its LightningModule and lets Fabric run the loop. A module with a ``_fabric``
attribute is such a module to ``fabric.setup``: it gets the ``Fabric`` (``self._fabric``), the wrapped optimizers
(``self._fabric_optimizers``) and becomes a callback, so ``fabric.call("on_train_epoch_end")`` reaches its hook.
``LitClassifier`` below does what LightningModule does with those attributes in a few lines, so this script needs
no ``lightning`` package; with it installed, subclass ``lightning.LightningModule`` instead and delete them.

    python examples/lightning_module.py --epochs 4
    fabric-core run --accelerator cpu --devices 2 --strategy ddp examples/lightning_module.py

Metrics (``train_loss`` every step, ``val_acc`` every epoch) go to ``runs/lightning_module/logs/version_0``.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from fabric_core import Fabric
from fabric_core.loggers import CSVLogger


class LightningModuleShape(nn.Module):
    """What LightningModule does with ``_fabric``: the part a Fabric loop relies on."""

    def __init__(self) -> None:
        super().__init__()
        self._fabric: Any = None  # the marker fabric.setup looks for; set to the Fabric there
        self._fabric_optimizers: list[Any] = []

    @property
    def fabric(self) -> Any:
        return self._fabric

    @property
    def logger(self) -> Any:
        return self._fabric.logger if self._fabric is not None else None

    def log(self, name: str, value: Tensor | float) -> None:
        self._fabric.log(name, value)

    def optimizers(self) -> Any:
        return self._fabric_optimizers[0] if len(self._fabric_optimizers) == 1 else self._fabric_optimizers

    def manual_backward(self, loss: Tensor) -> None:
        self._fabric.backward(loss)


class LitClassifier(LightningModuleShape):
    """A two-layer classifier written the Lightning way: steps, optimizer and hooks live on the module."""

    def __init__(self, features: int = 20, classes: int = 4, lr: float = 0.05) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))
        self.hooks_called: list[str] = []

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, targets = batch
        loss = nn.functional.cross_entropy(self(inputs), targets)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, targets = batch
        correct: Tensor = (self(inputs).argmax(1) == targets).sum()
        return correct

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    # Hooks: reached through fabric.call, because fabric.setup registered the module as a callback.
    def on_train_start(self) -> None:
        self.hooks_called.append("on_train_start")
        self.fabric.print(f"on_train_start: world size {self.fabric.world_size}")

    def on_train_epoch_end(self, epoch: int, val_acc: float) -> None:
        self.hooks_called.append("on_train_epoch_end")
        self.log("val_acc", val_acc)
        self.fabric.print(f"epoch {epoch}: val_acc {val_acc:.3f}")

    def on_train_end(self) -> None:
        self.hooks_called.append("on_train_end")


def dataset(samples: int, seed: int) -> TensorDataset:
    """Four classes, each a fixed random centre in 20 dimensions, plus noise."""
    centres = torch.randn(4, 20, generator=torch.Generator().manual_seed(0)) * 0.5
    generator = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, 4, (samples,), generator=generator)
    return TensorDataset(centres[targets] + torch.randn(samples, 20, generator=generator), targets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--out", default="runs/lightning_module")
    args = parser.parse_args()

    fabric = Fabric(loggers=CSVLogger(args.out, name="logs"))
    fabric.seed_everything(42, verbose=False)
    lit = LitClassifier()
    model, _ = fabric.setup(lit, lit.configure_optimizers())  # the module keeps the optimizer: lit.optimizers()
    train, val = fabric.setup_dataloaders(
        DataLoader(dataset(1024, seed=1), batch_size=32, shuffle=True), DataLoader(dataset(256, seed=2), batch_size=64)
    )

    fabric.call("on_train_start")
    step = 0
    for epoch in range(args.epochs):
        model.train()
        for batch_idx, batch in enumerate(train):
            loss = model.training_step(batch, batch_idx)
            lit.optimizers().zero_grad()
            lit.manual_backward(loss)
            lit.optimizers().step()
            step += 1
        model.eval()
        correct = torch.zeros((), device=fabric.device)
        with torch.no_grad():
            for batch_idx, batch in enumerate(val):
                correct += model.validation_step(batch, batch_idx)
        accuracy = float(fabric.all_reduce(correct, reduce_op="sum")) / len(val.dataset)
        fabric.call("on_train_epoch_end", epoch=epoch, val_acc=accuracy)
    fabric.call("on_train_end")
    fabric.logger.finalize("success")
    fabric.print(f"hooks: {' '.join(dict.fromkeys(lit.hooks_called))}; {step} steps")


if __name__ == "__main__":
    main()
