"""A ``lightning.pytorch`` Trainer with its loggers: ``python [-m fabric_core.lightning_imports] THIS_FILE OUT_DIR``.

Fits a small model for 2 epochs three ways, twice each (the second fit must take ``version_1``): with the
Trainer's defaults (TensorBoard logger since tensorboard is installed, a ModelCheckpoint), with an explicit
``CSVLogger`` and with an explicit ``TensorBoardLogger(log_graph=True)``, both also given hyperparameters by
hand. Writes ``OUT_DIR/report.json``: what the Trainer reported (``logger.log_dir``, the version, the best
checkpoint) and which Lightning Fabric modules served the loggers' base classes. The files themselves are read
by ``tests/lightning/test_lightning_trainer_loggers.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader


class Model(L.LightningModule):
    def __init__(self, lr: float = 0.1, width: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Sequential(torch.nn.Linear(2, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
        self.example_input_array = torch.ones(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: torch.Tensor, index: int) -> torch.Tensor:
        loss = self(batch).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def fit(root: Path, logger: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    loader = DataLoader(torch.randn(16, 2), batch_size=4)
    model = Model()
    trainer = L.Trainer(
        default_root_dir=root,
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        log_every_n_steps=1,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader)
    used = trainer.logger
    assert used is not None and trainer.checkpoint_callback is not None
    return {
        "logger": type(used).__name__,
        "log_dir": os.path.relpath(str(used.log_dir), root),
        "version": used.version,
        "checkpoint": os.path.relpath(trainer.checkpoint_callback.best_model_path, root),
        # The Lightning Fabric logger lightning.pytorch's subclasses: Lightning's own, or fabric-core's in the mode.
        "fabric_base": [
            f"{c.__module__}.{c.__qualname__}"
            for c in type(used).__mro__[1:]
            if c.__name__ == type(used).__name__ and not c.__module__.startswith("lightning.pytorch")
        ],
        "global_step": trainer.global_step,
    }


def main(out: Path) -> None:
    import lightning.fabric.loggers.csv_logs as csv_logs

    report: dict[str, Any] = {"csv_logs_module": csv_logs.__file__}
    for run in ("first", "second"):
        report[f"default-{run}"] = fit(out / "default", True)
        csv = CSVLogger(out / "explicit", name="csv")
        csv.log_hyperparams({"batch_size": 4})
        report[f"csv-{run}"] = fit(out / "explicit", csv)
        tensorboard = TensorBoardLogger(out / "explicit", name="tb", log_graph=True)
        tensorboard.log_hyperparams({"batch_size": 4})
        report[f"tb-{run}"] = fit(out / "explicit", tensorboard)
    (out / "report.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
