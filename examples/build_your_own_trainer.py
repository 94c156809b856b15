"""Build your own trainer on Fabric: a ``Trainer`` class with callbacks, periodic checkpoints and resuming.

``Trainer.fit`` runs up to ``max_epochs``, calls its callbacks' hooks through ``fabric.call``, saves
``{"model", "optimizer", "step", "epoch", "batch"}`` with ``fabric.save`` every ``save_every`` steps and at the end,
and, when the checkpoint folder already holds checkpoints, resumes from the newest one with ``fabric.load``:

    python examples/build_your_own_trainer.py --max-epochs 2      # trains epochs 0-1, saves as it goes
    python examples/build_your_own_trainer.py --max-epochs 4      # resumes from the last checkpoint, trains 2-3

The shuffling of each epoch is drawn from a generator seeded with the epoch, so the resumed run sees the batches an
uninterrupted one would and ends with the same parameters (the script prints their fingerprint). Several
processes work too (``fabric-core run --accelerator cpu --devices 2 --strategy ddp ...``): the data loader then
gets a ``DistributedSampler``, whose shuffling is also a function of the epoch.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from fabric_core import Fabric

SEED = 7


class Trainer:
    """A minimal trainer: the loop, the callbacks' hooks and the checkpoints; the model and data are the caller's."""

    def __init__(
        self, max_epochs: int, checkpoint_dir: str, save_every: int = 10, callbacks: list[Any] | None = None
    ) -> None:
        self.fabric = Fabric(callbacks=callbacks)
        self.max_epochs = max_epochs
        self.checkpoint_dir = Path(checkpoint_dir)
        self.save_every = save_every
        self.step = 0
        self.epoch = 0
        self.batch = 0  # batches of `epoch` already trained on

    def fit(self, model: nn.Module, optimizer: torch.optim.Optimizer, data: TensorDataset, batch_size: int) -> None:
        fabric = self.fabric
        shuffle = torch.Generator()
        loader = fabric.setup_dataloaders(DataLoader(data, batch_size=batch_size, shuffle=True, generator=shuffle))
        self.model, self.optimizer = fabric.setup(model, optimizer)
        self.resume()
        fabric.call("on_train_start", trainer=self)
        while self.epoch < self.max_epochs:
            shuffle.manual_seed(SEED + self.epoch)  # this epoch's order, whether or not the run was resumed
            for index, (inputs, targets) in enumerate(loader):
                if index < self.batch:  # trained on before the run was resumed
                    continue
                loss = self.training_step(inputs, targets)
                self.step += 1
                self.batch = index + 1
                fabric.call("on_train_batch_end", trainer=self, loss=loss.item())
                if self.step % self.save_every == 0:
                    self.save()
            fabric.call("on_train_epoch_end", trainer=self)
            self.epoch += 1
            self.batch = 0
        self.save()
        fabric.call("on_train_end", trainer=self)

    def training_step(self, inputs: Tensor, targets: Tensor) -> Tensor:
        self.optimizer.zero_grad()
        loss = nn.functional.mse_loss(self.model(inputs), targets)
        self.fabric.backward(loss)
        self.optimizer.step()
        return loss.detach()

    def state(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer, "step": 0, "epoch": 0, "batch": 0}

    def save(self) -> None:
        state = self.state() | {"step": self.step, "epoch": self.epoch, "batch": self.batch}
        path = self.checkpoint_dir / f"step-{self.step:06d}.ckpt"
        self.fabric.save(path, state)
        self.fabric.call("on_save_checkpoint", trainer=self, path=path)

    def resume(self) -> None:
        checkpoints = sorted(self.checkpoint_dir.glob("step-*.ckpt"))
        if not checkpoints:
            return
        state = self.state()
        self.fabric.load(checkpoints[-1], state)  # restores model and optimizer in place, fills in the counters
        self.step, self.epoch, self.batch = state["step"], state["epoch"], state["batch"]
        self.fabric.print(f"resumed from {checkpoints[-1].name}: step {self.step}, epoch {self.epoch}")


class PrintProgress:
    """A callback: its methods are named after the hooks the trainer calls, and get the arguments they name."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.losses: list[float] = []
        self.saved = ""

    def on_train_batch_end(self, trainer: Trainer, loss: float) -> None:
        self.losses.append(loss)
        if trainer.step % self.every == 0:
            trainer.fabric.print(f"epoch {trainer.epoch}  step {trainer.step:4d}  loss {loss:.5f}")

    def on_save_checkpoint(self, path: Path) -> None:
        self.saved = path.name

    def on_train_end(self, trainer: Trainer) -> None:
        digest = hashlib.sha256()
        for parameter in trainer.model.parameters():
            digest.update(parameter.detach().cpu().numpy().tobytes())
        trainer.fabric.print(f"done: {trainer.epoch} epochs, {trainer.step} steps, last checkpoint {self.saved}")
        trainer.fabric.print(f"parameters {digest.hexdigest()[:16]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-epochs", type=int, default=4)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--out", default="runs/own_trainer")
    args = parser.parse_args()

    torch.use_deterministic_algorithms(True)
    trainer = Trainer(args.max_epochs, args.out, args.save_every, callbacks=[PrintProgress(every=8)])
    trainer.fabric.seed_everything(SEED, verbose=False)
    inputs = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    targets = (inputs[:, :4] * inputs[:, 4:]).sum(1, keepdim=True)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    trainer.fit(model, torch.optim.Adam(model.parameters(), lr=1e-2), TensorDataset(inputs, targets), batch_size=16)


if __name__ == "__main__":
    main()
