"""A LightningModule trained with Fabric: ``self.log``, ``self.fabric``, hooks via ``fabric.call``, ``optimizers()``.

The module is a stand-in that does with ``_fabric`` what LightningModule does (``_jobs/lit_job.py``), so
nothing here needs the ``lightning`` package.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core import Fabric
from fabric_core.loggers import CSVLogger
from fabric_core.wrappers import FabricOptimizer

JOB = Path(__file__).parents[1] / "_jobs" / "lit_job.py"
_spec = importlib.util.spec_from_file_location("lit_job", JOB)
assert _spec is not None and _spec.loader is not None
lit_job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lit_job)
LitShaped = lit_job.LitShaped


def names(lit: Any) -> list[str]:
    return [name for name, _ in lit.events]


def test_self_log_reaches_a_csv_file_and_hooks_and_optimizers_work(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1, loggers=CSVLogger(str(tmp_path), name="lit"))
    lit = LitShaped()
    model, optimizer = fabric.setup(lit, torch.optim.SGD(lit.parameters(), lr=0.1))
    assert lit.fabric is fabric and lit.logger is fabric.logger and lit.loggers == fabric.loggers
    # The wrapped optimizer, the very object `setup` returned: stepping it goes through the strategy.
    assert lit.optimizers() is optimizer and isinstance(optimizer, FabricOptimizer)
    assert lit._fabric_optimizers == [optimizer]
    assert names(lit) == ["on_after_setup"] and lit.events[0][1] is fabric  # it was a callback already then
    fabric.call("on_train_start")
    losses = []
    for epoch in range(3):
        loss = model.training_step(torch.randn(8, 4))
        losses.append(loss.item())
        lit.optimizers().zero_grad()
        lit.manual_backward(loss)
        lit.optimizers().step()
        fabric.call("on_train_epoch_end", epoch=epoch, unused="filtered out by the signature")
    fabric.logger.save()
    assert names(lit) == [
        "on_after_setup",
        "on_train_start",
        *["on_after_optimizer_step", "on_train_epoch_end"] * 3,
    ]
    assert lit.events[2][1] is optimizer.optimizer  # the optimizer that stepped, as for any callback
    with open(fabric.logger.metrics_file_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["train_loss"]) for r in rows] == pytest.approx(losses)


def test_a_module_set_up_again_is_a_callback_once(tmp_path: Path) -> None:
    lit = LitShaped()
    fabric = Fabric(accelerator="cpu", devices=1, callbacks=[lit])
    fabric.setup_module(lit)
    first = fabric.setup(lit, torch.optim.SGD(lit.parameters(), lr=0.1))[1]
    fabric.setup_module(lit)  # setup_module leaves the optimizers alone, as Lightning's does
    assert [c for c in fabric._callbacks if c is lit] == [lit]
    assert lit.optimizers() is first
    lit.events.clear()
    fabric.call("on_train_start")
    assert names(lit) == ["on_train_start"]


def test_setup_module_gives_the_fabric_and_setup_without_optimizers_an_empty_list() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    lit = LitShaped()
    lit._fabric_optimizers = ["kept"]
    fabric.setup_module(lit)
    assert lit.fabric is fabric and lit._fabric_optimizers == ["kept"]
    other = LitShaped()
    fabric.setup(other)
    assert other.fabric is fabric and other._fabric_optimizers == [] and other.optimizers() == []


def test_a_plain_module_is_neither_changed_nor_registered() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    module = torch.nn.Linear(4, 1)
    fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
    assert not hasattr(module, "_fabric") and not hasattr(module, "_fabric_optimizers")
    assert fabric._callbacks == []


def test_log_with_logger_false_writes_nothing(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1, loggers=CSVLogger(str(tmp_path), name="lit"))
    lit = LitShaped()
    fabric.setup(lit)
    lit.log("kept", 1.0)
    lit.log("dropped", 2.0, logger=False)
    fabric.logger.save()
    with open(fabric.logger.metrics_file_path, newline="") as f:
        assert list(csv.DictReader(f)) == [{"kept": "1.0", "step": "0"}]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_lightning_module_under_two_process_ddp(tmp_path: Path) -> None:
    from fabric_core.testing import run_in_own_session

    skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    done = run_in_own_session([sys.executable, str(JOB), str(tmp_path)], timeout=100, env=env)
    assert done.returncode == 0, done.stdout[-4000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, report in enumerate(reports):
        assert report["rank"] == rank and report["world_size"] == 2
        assert report["fabric_is_lit_fabric"] and report["optimizer_is_wrapped"]
        assert report["events"] == ["on_after_setup", ["on_train_start", rank], *["on_after_optimizer_step"] * 3]
        assert report["synchronised"]  # DDP averaged the gradients that manual_backward produced
    (metrics,) = tmp_path.glob("lit/version_*/metrics.csv")  # rank 0 writes, rank 1 does not
    with open(metrics, newline="") as f:
        assert len([row["train_loss"] for row in csv.DictReader(f)]) == 3


class _DeviceDtypeModuleMixin(torch.nn.Module):
    """Named as Lightning's mixin (a LightningModule's base): it keeps ``_device`` for ``self.device``."""

    def __init__(self) -> None:
        super().__init__()
        self._device = torch.device("meta")  # stale on purpose: only `setup` can make it right here

    @property
    def device(self) -> torch.device:
        return self._device


class LitWithDevice(LitShaped, _DeviceDtypeModuleMixin):
    pass


@pytest.mark.parametrize("move_to_device", [True, False])
def test_self_device_is_the_device_the_model_is_on(move_to_device: bool) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    lit = LitWithDevice()
    fabric.setup(lit, move_to_device=move_to_device)
    assert lit.device == torch.device("cpu") == fabric.device
