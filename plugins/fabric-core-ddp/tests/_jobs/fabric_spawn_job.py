"""Fabric(strategy="ddp_spawn") on two CPU processes; each rank writes what it saw to OUTDIR/rank<N>.json.

Usage: python fabric_spawn_job.py OUTDIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from fabric_core import Fabric
from fabric_core._kernel.registry import spec
from fabric_core.io.torch_io import TorchCheckpointIO

STEPS = 3
LR = 0.1


class RecordingIO(TorchCheckpointIO):
    """Writes as usual and leaves a mark of which rank wrote."""

    def __init__(self, outdir: str) -> None:
        super().__init__()
        self.outdir = outdir

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        rank = torch.distributed.get_rank()
        Path(self.outdir, f"saved_by_rank{rank}").write_text("x")
        super().save_checkpoint(checkpoint, path, storage_options=storage_options)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator)


def flat_grads(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])


def grads_equal_everywhere(fabric: Fabric, module: torch.nn.Module) -> bool:
    gathered = fabric.all_gather(flat_grads(module))
    return bool(torch.equal(gathered[0], gathered[1]))


def work(fabric: Fabric, outdir: str) -> dict[str, Any]:
    r = fabric.global_rank
    out: dict[str, Any] = {"rank": r, "first_draw": torch.rand(3).tolist()}

    torch.manual_seed(100 + r)  # different initial weights on each rank
    raw = torch.nn.Linear(4, 1)
    out["weights_before_setup"] = raw.weight.detach().flatten().tolist()
    model, optimizer = fabric.setup(raw, torch.optim.SGD(raw.parameters(), lr=LR))
    out["weights_after_setup"] = model.weight.detach().flatten().tolist()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    ddp = model._forward_module
    out["ddp"] = [type(ddp).__name__, ddp.device_ids, ddp.gradient_as_bucket_view]

    x, y = data()
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y, torch.arange(8)), batch_size=4))
    out["indices"] = []
    out["grads_equal"] = []
    for _ in range(STEPS):
        for xb, yb, idx in loader:
            out["indices"].append(idx.tolist())
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            fabric.backward(loss)
            out["grads_equal"].append(grads_equal_everywhere(fabric, model))
            optimizer.step()
            optimizer.zero_grad()
    out["final_weights"] = [p.detach().flatten().tolist() for p in model.parameters()]

    with fabric.no_backward_sync(model):
        fabric.backward(torch.nn.functional.mse_loss(model(x[r::2]), y[r::2]))
    out["grads_equal_without_sync"] = grads_equal_everywhere(fabric, model)
    fabric.backward(torch.nn.functional.mse_loss(model(x[r::2]), y[r::2]))
    out["grads_equal_after_sync"] = grads_equal_everywhere(fabric, model)
    optimizer.zero_grad()

    out["all_reduce"] = fabric.all_reduce({"n": 3, "t": torch.tensor([r + 1.0])}, reduce_op="sum")
    out["all_reduce"] = {"n": out["all_reduce"]["n"].tolist(), "t": out["all_reduce"]["t"].tolist()}
    gathered = fabric.all_gather({"w": torch.full((2,), float(r)), "n": r})
    out["all_gather"] = {k: v.tolist() for k, v in gathered.items()}
    out["broadcast"] = fabric.broadcast({"config": {"lr": LR, "tags": ["a", "b"]}} if r == 0 else None)
    try:
        fabric.all_gather(torch.zeros(3 + r))
        out["uneven"] = "no error"
    except ValueError as err:
        out["uneven"] = str(err)

    with fabric.rank_zero_first():
        out["entered"] = time.time()
        if r == 0:
            Path(outdir, "prepared").write_text("ready")
        out["saw_prepared"] = Path(outdir, "prepared").exists()
        out["left"] = time.time()

    checkpoint = Path(outdir, "checkpoint.pt")
    fabric.save(checkpoint, {"model": model, "optimizer": optimizer, "step": STEPS})
    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    state: dict[str, Any] = {"model": model, "optimizer": optimizer, "step": 0}
    remainder = fabric.load(checkpoint, state)
    out["restored"] = all(torch.equal(a, b) for a, b in zip(saved, model.parameters()))
    out["restored_step"], out["remainder"] = state["step"], sorted(remainder)
    out["checkpoint_keys"] = sorted(torch.load(checkpoint, weights_only=True)["model"])

    Path(outdir, f"rank{r}.json").write_text(json.dumps(out))
    return {"rank": r, "initial": initial, "final": model.weight.detach()}


def reference(initial: dict[str, torch.Tensor]) -> list[list[float]]:
    """The same training in one process on the full batch."""
    model = torch.nn.Linear(4, 1)
    model.load_state_dict(initial)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = data()
    for _ in range(STEPS):
        torch.nn.functional.mse_loss(model(x), y).backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().flatten().tolist() for p in model.parameters()]


if __name__ == "__main__":
    outdir = sys.argv[1]
    torch.manual_seed(7)
    expected_draw = torch.rand(3).tolist()
    torch.manual_seed(7)
    fabric = Fabric(
        accelerator="cpu",
        devices=2,
        strategy=spec("ddp_spawn", gradient_as_bucket_view=True),
        plugins=[RecordingIO(outdir)],
    )
    result = fabric.launch(work, outdir)
    summary = {
        "rank": result["rank"],
        "final_is_cpu_tensor": isinstance(result["final"], torch.Tensor) and result["final"].device.type == "cpu",
        "expected_draw": expected_draw,
        "reference": reference(result["initial"]),
    }
    Path(outdir, "parent.json").write_text(json.dumps(summary))
