"""Checkpoint save and load of a 50M-parameter model with its Adam state (about 600 MB on disk).

Every variant saves the same tensors (one model and optimizer, wrapped by each framework) to a new file in
the same folder. Before each timed save, untimed, the variant's file of the round before is deleted and
``os.sync()`` writes back every dirty page, so that each save starts from the same page-cache and disk state
and none pays for the one before it (a file replaced in place would make its save free the old blocks).

Two save rows, each comparing like with like:

- ``ckpt_save``: durable saves. raw is ``torch.save`` into a new file followed by the fsyncs fabric-core's
  save does (the file, then its folder); fabric-core is ``fabric.save`` (temp file, fsync, rename, folder
  fsync; no zip CRC32s, which ``torch.load`` never checks).
- ``ckpt_save_nosync``: nobody fsyncs. raw is a plain ``torch.save``; fabric-core is ``fabric.save`` with
  ``os.fsync`` turned into a no-op for the call (the same code path minus the flushes to disk); Lightning and
  Accelerate do not fsync.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from _harness import ACCELERATE, CORE, LIGHTNING, RAW, Goal, RowResult, fastest_of, interleave, row_result
from torch import nn

__all__ = ["collect", "model_and_optimizer"]

ROWS = ("ckpt_save", "ckpt_save_nosync", "ckpt_load")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer, int]:
    """The checkpoint rows' state: 50M parameters and Adam with its state; and the parameter count."""
    torch.manual_seed(0)
    # 12 x (2048 x 2048 + 2048) = 50.4M parameters; Adam's two moments triple the bytes.
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(12)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()  # creates the optimizer state
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer, sum(p.numel() for p in model.parameters())


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _durable_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a new file, then the fsyncs ``fabric.save`` does: the file, then its folder."""
    with open(path, "wb") as file:
        torch.save(obj, file)
        file.flush()
        os.fsync(file.fileno())
    _fsync_folder(path.parent)


@contextlib.contextmanager
def _no_fsync() -> Iterator[None]:
    """``os.fsync`` does nothing inside the block (for the row where no variant flushes to disk)."""
    original = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = original


def _clear(target: Path) -> None:
    """Untimed, before a save: the variant's previous output gone and every dirty page written back."""
    from fabric_core.io.atomic import wait_for_removals

    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)
    wait_for_removals()
    os.sync()


def _save_measure(save: Callable[[], Any], target: Path, repeat: int) -> Callable[[], float]:
    def measure() -> float:
        _clear(target)
        start = time.perf_counter()
        save()
        return time.perf_counter() - start

    return fastest_of(measure, repeat)


def _timed(function: Callable[[], Any]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


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

    model, optimizer, count = model_and_optimizer()
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
    # Each round's value is the fastest of REPEAT back-to-back saves (see fastest_of): with one save per
    # round the A/A ratio spread over [0.5, 3.5] on a shared machine.
    rounds, repeat = (3, 2) if quick else (8, 3)
    warmup = 0 if quick else 1
    results: list[RowResult] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_CHECKPOINT_DIR")) as tmp:
        root = Path(tmp)

        def state() -> dict[str, Any]:
            return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

        core, core_model, core_optimizer = frameworks[CORE]
        if "ckpt_save" in wanted:
            durable = {
                RAW: _save_measure(lambda: _durable_torch_save(state(), root / "raw.pt"), root / "raw.pt", repeat),
                CORE: _save_measure(
                    lambda: core.save(root / "core.pt", {"model": core_model, "optimizer": core_optimizer}),
                    root / "core.pt",
                    repeat,
                ),
            }
            results.append(
                row_result(
                    "ckpt_save",
                    f"checkpoint save, durable ({count / 1e6:.0f}M params + Adam), time",
                    interleave(durable, rounds=rounds, seed=7, warmup=warmup),
                    goal=Goal("<=", 1.0),
                    labels={
                        RAW: "torch.save(state, new file) + fsync(file) + fsync(folder)",
                        CORE: "fabric.save(path, {model, optimizer}) (atomic: temp, fsync, rename, folder fsync)",
                    },
                    note=(
                        f"Each save writes a new file in the same folder; untimed before it: the previous"
                        f" file deleted and `os.sync()`. A round's value: the fastest of {repeat} saves."
                    ),
                )
            )
        if "ckpt_save_nosync" in wanted:
            saves: dict[str, tuple[Callable[[], Any], Path]] = {
                RAW: (lambda: torch.save(state(), root / "raw-nosync.pt"), root / "raw-nosync.pt"),
            }
            for name, (framework, m, o) in frameworks.items():
                target = root / f"{name}-nosync.pt"
                saves[name] = (lambda f=framework, m=m, o=o, t=target: f.save(t, {"model": m, "optimizer": o}), target)
            if accelerator is not None:
                saves[ACCELERATE] = (lambda: accelerator.save_state(str(root / "accelerate")), root / "accelerate")

            def unsynced(save: Callable[[], Any]) -> Callable[[], Any]:
                def run() -> None:
                    with _no_fsync():
                        save()

                return run

            measures = {name: _save_measure(unsynced(save), target, repeat) for name, (save, target) in saves.items()}
            results.append(
                row_result(
                    "ckpt_save_nosync",
                    f"checkpoint save, no fsync ({count / 1e6:.0f}M params + Adam), time",
                    interleave(measures, rounds=rounds, seed=9, warmup=warmup),
                    labels={
                        RAW: "torch.save(state, new file)",
                        CORE: "fabric.save(path, {model, optimizer}) with os.fsync a no-op (temp, rename)",
                        LIGHTNING: "fabric.save(path, {model, optimizer})",
                        ACCELERATE: "accelerator.save_state(dir) (safetensors)",
                    },
                    note=(
                        "Nobody flushes to disk; the same untimed delete + `os.sync()` before every save. A round's"
                        f" value: the fastest of {repeat} saves."
                    ),
                )
            )
        if "ckpt_load" in wanted:
            torch.save(state(), root / "raw.pt")
            if accelerator is not None and not (root / "accelerate").exists():
                accelerator.save_state(str(root / "accelerate"))
            os.sync()

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
                    interleave(measures_load, rounds=3 * rounds, seed=8, warmup=warmup),
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
