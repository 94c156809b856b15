"""Checkpoint save and load of a 50M-parameter model with its Adam state (about 600 MB on disk).

Every variant saves the same tensors (one model and optimizer, wrapped by each framework), replacing its own
file of the round before, as a training loop that keeps ``last.ckpt`` does. After each timed save, untimed,
``os.sync()`` writes back the dirty pages (raw ``torch.save`` leaves all of them) and fabric-core's
background deletion of the replaced file finishes, so that no variant pays for the one before it.
fabric-core's save is atomic and durable (temp file, fsync, rename) and leaves out the zip CRC32s that
``torch.load`` never checks; raw ``torch.save`` truncates the old file in place, in the caller's thread.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _harness import ACCELERATE, CORE, LIGHTNING, RAW, Goal, RowResult, interleave, row_result
from torch import nn

__all__ = ["collect"]

ROWS = ("ckpt_save", "ckpt_load")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _model_and_optimizer(quick: bool) -> tuple[nn.Module, torch.optim.Optimizer, int]:
    torch.manual_seed(0)
    # 12 x (2048 x 2048 + 2048) = 50.4M parameters; Adam's two moments triple the bytes.
    layers = 12
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(layers)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()  # creates the optimizer state
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer, sum(p.numel() for p in model.parameters())


def _settle() -> None:
    from fabric_core.io.atomic import wait_for_removals

    wait_for_removals()
    os.sync()


def _timed(function: Callable[[], Any], after: Callable[[], Any] | None = None) -> float:
    start = time.perf_counter()
    function()
    elapsed = time.perf_counter() - start
    if after is not None:
        after()
    return elapsed


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure checkpoint save and load.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        ``ckpt_save`` and ``ckpt_load`` (those selected).
    """
    wanted = [r for r in ROWS if rows is None or r in rows]
    if not wanted:
        return []
    from fabric_core import Fabric

    model, optimizer, count = _model_and_optimizer(quick)
    fabric = Fabric(accelerator="cpu", devices=1)
    f_model, f_optimizer = fabric.setup(model, optimizer)
    frameworks: dict[str, Any] = {CORE: (fabric, f_model, f_optimizer)}
    if _installed("lightning_fabric"):
        from lightning_fabric import Fabric as LightningFabric

        lightning = LightningFabric(accelerator="cpu", devices=1)
        # setup() on the already wrapped objects would refuse them; Lightning wraps the raw ones.
        frameworks[LIGHTNING] = (lightning, *lightning.setup(model, optimizer))
    accelerator = None
    if _installed("accelerate"):
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
        accelerator = Accelerator(cpu=True)
        accelerator.prepare(model, optimizer)
    # The disk is the noisiest thing these machines share: more rounds than the step rows need.
    rounds = 4 if quick else 20
    results: list[RowResult] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_CHECKPOINT_DIR")) as tmp:
        root = Path(tmp)
        saves: dict[str, Callable[[], Any]] = {
            RAW: lambda: torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, root / "raw.pt")
        }
        for name, (framework, m, o) in frameworks.items():
            saves[name] = lambda f=framework, m=m, o=o, n=name: f.save(root / f"{n}.pt", {"model": m, "optimizer": o})
        if accelerator is not None:
            saves[ACCELERATE] = lambda: accelerator.save_state(str(_fresh(root / "accelerate")))
        measures_save = {name: (lambda s=save: _timed(s, after=_settle)) for name, save in saves.items()}
        save_values = interleave(measures_save, rounds=rounds, seed=7, warmup=1 if not quick else 0)
        if "ckpt_save" in wanted:
            results.append(
                row_result(
                    "ckpt_save",
                    f"checkpoint save ({count / 1e6:.0f}M params + Adam), time",
                    save_values,
                    goal=Goal("<=", 1.0),
                    labels={
                        RAW: "torch.save({model, optimizer state dicts}, path)",
                        CORE: "fabric.save(path, {model, optimizer}) (atomic, fsynced, no zip CRC32s)",
                        LIGHTNING: "fabric.save(path, {model, optimizer})",
                        ACCELERATE: "accelerator.save_state(dir) (safetensors)",
                    },
                    note=(
                        "One save per round, replacing the round before's file; untimed after each: `os.sync()`"
                        " and fabric-core's background deletion of the replaced file."
                    ),
                )
            )
        if "ckpt_load" in wanted:

            def raw_load() -> None:
                checkpoint = torch.load(root / "raw.pt")
                model.load_state_dict(checkpoint["model"])
                optimizer.load_state_dict(checkpoint["optimizer"])

            loads: dict[str, Callable[[], Any]] = {RAW: raw_load}
            for name, (framework, m, o) in frameworks.items():
                loads[name] = lambda f=framework, m=m, o=o: f.load(root / "raw.pt", {"model": m, "optimizer": o})
            if accelerator is not None:
                loads[ACCELERATE] = lambda: accelerator.load_state(str(root / "accelerate"))
            measures_load = {name: (lambda s=load: _timed(s)) for name, load in loads.items()}
            results.append(
                row_result(
                    "ckpt_load",
                    f"checkpoint load ({count / 1e6:.0f}M params + Adam), time",
                    # A load is a twentieth of a save: many rounds bring its noise down for little time.
                    interleave(measures_load, rounds=3 * rounds, seed=8, warmup=1 if not quick else 0),
                    goal=Goal("<=", 1.0),
                    labels={
                        RAW: "torch.load(path) + load_state_dict x2",
                        CORE: "fabric.load(path, {model, optimizer}) (the file mapped)",
                        LIGHTNING: "fabric.load(path, {model, optimizer})",
                        ACCELERATE: "accelerator.load_state(dir)",
                    },
                    note="Every variant reads the file raw torch.save wrote (Accelerate: its own folder).",
                )
            )
    return results
