"""A LightningModule-shaped class: what LightningModule does with ``_fabric``, without the ``lightning`` package.

It mirrors the parts of ``lightning.pytorch.LightningModule`` that use ``_fabric`` when a ``Fabric`` set it
up: ``fabric``, ``logger``/``loggers``, ``log``/``log_dict`` (through ``self._fabric.log_dict``),
``optimizers()`` (``_fabric_optimizers``, one optimizer unpacked) and ``manual_backward``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class LitShaped(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._fabric: Any = None
        self._fabric_optimizers: list[Any] = []
        self.layer = torch.nn.Linear(4, 1)
        self.events: list[tuple[str, Any]] = []

    # -- what LightningModule does when `_fabric` is set ------------------------------------------------------
    @property
    def fabric(self) -> Any:
        return self._fabric

    @property
    def logger(self) -> Any:
        return self._fabric.logger if self._fabric is not None else None

    @property
    def loggers(self) -> Any:
        return self._fabric.loggers if self._fabric is not None else []

    def log(self, name: str, value: Any, logger: bool | None = None, **_: Any) -> None:
        self.log_dict({name: value}, logger=logger)

    def log_dict(self, dictionary: dict[str, Any], logger: bool | None = None, **_: Any) -> None:
        if self._fabric is None:
            raise RuntimeError("this stand-in logs through Fabric only")
        if logger is False:
            return
        self._fabric.log_dict(metrics=dictionary)

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        opts = self._fabric_optimizers
        if isinstance(opts, list) and len(opts) == 1 and isinstance(opts[0], torch.optim.Optimizer):
            return opts[0]
        return opts

    def manual_backward(self, loss: Tensor) -> None:
        self._fabric.backward(loss)

    # -- the user's code --------------------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def training_step(self, batch: Tensor) -> Tensor:
        loss = self(batch).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def on_train_start(self) -> None:
        self.events.append(("on_train_start", self.fabric.global_rank))

    def on_train_epoch_end(self, epoch: int) -> None:
        self.events.append(("on_train_epoch_end", epoch))

    def on_after_setup(self, fabric: Any, module: Any) -> None:
        self.events.append(("on_after_setup", fabric))

    def on_after_optimizer_step(self, optimizer: Any) -> None:
        self.events.append(("on_after_optimizer_step", optimizer))


if __name__ == "__main__":
    # Usage: python lit_job.py OUTDIR - two ranks (ddp on CPU, gloo); each writes OUTDIR/rank<N>.json.
    import json
    import sys
    from pathlib import Path

    from fabric_core import Fabric
    from fabric_core.loggers import CSVLogger
    from fabric_core.wrappers import FabricOptimizer

    outdir = Path(sys.argv[1])
    fabric = Fabric(accelerator="cpu", strategy="ddp", devices=2, loggers=CSVLogger(str(outdir), name="lit"))
    fabric.launch()
    lit = LitShaped()
    model, optimizer = fabric.setup(lit, torch.optim.SGD(lit.parameters(), lr=0.1))
    fabric.call("on_train_start")
    for _ in range(3):
        loss = model.training_step(torch.randn(8, 4) + fabric.global_rank)
        lit.optimizers().zero_grad()
        lit.manual_backward(loss)
        lit.optimizers().step()
    fabric.logger.save()
    weights = fabric.all_gather(lit.layer.weight.detach())
    report = {
        "rank": fabric.global_rank,
        "world_size": lit.fabric.world_size,
        "fabric_is_lit_fabric": lit.fabric is fabric,
        "optimizer_is_wrapped": lit.optimizers() is optimizer and isinstance(optimizer, FabricOptimizer),
        "events": [name if name != "on_train_start" else [name, value] for name, value in lit.events],
        "synchronised": bool(torch.equal(weights[0], weights[1])),
    }
    (outdir / f"rank{fabric.global_rank}.json").write_text(json.dumps(report))
