"""One install: with fabric-core alone next to ``lightning`` (no plugin), zero-edit mode runs Lightning programs.

Run by ``scripts/one_install_check.sh`` in the venv it builds (``pip install torch fabric-core lightning``, no
``fabric-core-*`` plugin); marked ``one_install`` and deselected elsewhere. Each program runs in a fresh
interpreter from a scratch folder, on real Lightning and in zero-edit mode, and the two are compared.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.one_install, pytest.mark.timeout(300)]

FABRIC_SCRIPT = """
from lightning.fabric import Fabric
import json, sys
import torch
import lightning

fabric = Fabric(accelerator="cpu", devices=1)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
data = torch.randn(16, 4)
for _ in range(5):
    loss = model(data).pow(2).mean()
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
fabric.save("ckpt.pt", {"model": model, "step": 5})
restored = torch.nn.Linear(4, 1)
remainder = fabric.load("ckpt.pt", {"model": restored})

from lightning.fabric.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator, find_usable_cuda_devices
from lightning.fabric.accelerators.cuda import num_cuda_devices
from lightning.fabric.plugins.precision.bitsandbytes import _BITSANDBYTES_AVAILABLE
from lightning.fabric.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy
from lightning.fabric.strategies.deepspeed import _DEEPSPEED_AVAILABLE
from lightning.fabric.loggers.tensorboard import _TENSORBOARD_AVAILABLE

errors = {}
for name, call in {
    "deepspeed": lambda: DeepSpeedStrategy(),
    "fsdp": lambda: FSDPStrategy(),
    "cuda": lambda: Fabric(accelerator="cuda"),
}.items():
    try:
        call()
        errors[name] = None
    except Exception as exc:
        errors[name] = [type(exc).__name__, isinstance(exc, (ModuleNotFoundError, ValueError)), str(exc)]
print(json.dumps({
    "fabric": type(fabric).__module__,
    "loss": loss.item(),
    "equal": torch.equal(restored.weight, model.weight.detach()),
    "remainder": remainder,
    "available": [CUDAAccelerator.is_available(), MPSAccelerator.is_available(), XLAAccelerator.is_available()],
    "num_cuda_devices": num_cuda_devices(),
    "flags": [bool(_BITSANDBYTES_AVAILABLE), bool(_DEEPSPEED_AVAILABLE), bool(_TENSORBOARD_AVAILABLE)],
    "ddp_is_a_class": isinstance(DDPStrategy, type),
    "errors": errors,
    "pytorch": "lightning.pytorch" in sys.modules,
}))
"""

TRAINER_SCRIPT = """
import json, os
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(L.LightningModule):
    def __init__(self, lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


L.seed_everything(0)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
trainer = L.Trainer(max_epochs=2, log_every_n_steps=1, enable_progress_bar=False)  # every default
trainer.fit(Regression(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=32))
log_dir = trainer.logger.log_dir
with open(os.path.join(log_dir, "metrics.csv")) as f:
    header = f.readline().strip().split(",")
print(json.dumps({
    "logger": type(trainer.logger).__name__,
    "files": sorted(os.listdir(log_dir)),
    "header": sorted(header),
    "checkpoint": os.path.basename(trainer.checkpoint_callback.best_model_path),
    "accelerator": type(trainer.accelerator).__name__,
    "strategy": type(trainer.strategy).__name__,
    "logger_bases": [c.__module__ for c in type(trainer.logger).__mro__],
}))
"""


def run(script: str, tmp_path: Path, zero_edit: bool) -> dict[str, object]:
    folder = tmp_path / ("fabric-core" if zero_edit else "lightning")
    folder.mkdir(exist_ok=True)
    (folder / "program.py").write_text(textwrap.dedent(script))
    mode = ["-m", "fabric_core.lightning_imports"] if zero_edit else []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "PYTHONPATH"))}
    done = subprocess.run(
        [sys.executable, *mode, "program.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_this_venv_has_fabric_core_and_lightning_and_no_plugin() -> None:
    names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in importlib.metadata.distributions()}
    assert {"fabric-core", "lightning", "torch"} <= names
    plugins = sorted(n for n in names if n.startswith("fabric-core-"))
    assert plugins == [], f"this check needs a venv without plugins; found {plugins}"
    # The one entry point is the core's own plugin (the built-in components), which fabric-core itself declares.
    declared = [
        (ep.name, ep.dist.name if ep.dist else None)
        for ep in importlib.metadata.entry_points(group="fabric_core.plugins")
    ]
    assert [(name, (dist or "").lower().replace("_", "-")) for name, dist in declared] == [("builtin", "fabric-core")]


def test_a_fabric_program_runs_and_absent_plugins_behave_as_absent_hardware(tmp_path: Path) -> None:
    theirs = run(FABRIC_SCRIPT, tmp_path, zero_edit=False)
    ours = run(FABRIC_SCRIPT, tmp_path, zero_edit=True)
    assert theirs["fabric"] == "lightning.fabric.fabric" and ours["fabric"] == "fabric_core.fabric"
    for key in ("loss", "equal", "remainder", "available", "num_cuda_devices", "ddp_is_a_class", "pytorch"):
        assert ours[key] == theirs[key], key
    assert ours["equal"] is True and ours["available"] == [False, False, False] and ours["num_cuda_devices"] == 0
    assert ours["flags"] == [False, False, False]  # the plugins are absent (Lightning answers for its packages)
    errors = ours["errors"]
    assert isinstance(errors, dict)
    assert errors["deepspeed"][:2] == ["MissingPackageError", True]
    assert "pip install fabric-core-deepspeed" in errors["deepspeed"][2]
    assert "pip install fabric-core-fsdp" in errors["fsdp"][2]
    assert errors["cuda"][1] is True and "pip install fabric-core-cuda" in errors["cuda"][2]


def test_a_trainer_with_every_default_fits_on_cpu(tmp_path: Path) -> None:
    theirs = run(TRAINER_SCRIPT, tmp_path, zero_edit=False)
    ours = run(TRAINER_SCRIPT, tmp_path, zero_edit=True)
    assert "lightning.fabric.loggers.csv_logs" in theirs["logger_bases"]  # type: ignore[operator]
    assert "fabric_core.loggers.csv_logs" in ours["logger_bases"]  # type: ignore[operator]  # ours, under theirs
    for key in ("logger", "files", "header", "checkpoint", "accelerator", "strategy"):
        assert ours[key] == theirs[key], key
    assert ours["logger"] == "CSVLogger" and "metrics.csv" in ours["files"] and "hparams.yaml" in ours["files"]
    assert ours["checkpoint"] == "epoch=1-step=8.ckpt"
