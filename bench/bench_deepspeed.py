"""DeepSpeed ZeRO-2 on two processes (gloo, 127.0.0.1): fabric-core's ``deepspeed`` strategy against raw DeepSpeed.

Run alone (``python bench/bench_deepspeed.py [--quick] [--json PATH]``) or through ``bench/run.py``, which
calls :func:`collect`. ``torch.multiprocessing`` spawns both processes, which look like a ``torchrun`` job:
raw ``torch.distributed`` creates the process group, DeepSpeed and Fabric join it, and raw and fabric-core
steps are interleaved in the same processes (see ``_harness.py``).

Row ``deepspeed_steps``: training steps per second of the same MLP under ZeRO stage 2 with AdamW, raw
(``deepspeed.initialize`` with the config a DeepSpeed user writes, and the engine's own loop) against
``Fabric(strategy=spec("deepspeed", stage=2))`` with its defaults and the Fabric loop.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _harness import CORE, RAW, Goal, RowResult, interleave, row_result, time_block  # noqa: E402
from _spawn import act_as_torchrun_rank, hand_back, run_as_script, spawn_rows  # noqa: E402

__all__ = ["collect"]

WORLD_SIZE = 2
ROWS = ("deepspeed_steps",)
WIDTH, DEPTH, BATCH = 512, 4, 64
STEPS_PER_BLOCK = 10
#: What a DeepSpeed user writes for ZeRO-2 with a torch optimizer; DeepSpeed's defaults do the rest.
RAW_CONFIG: dict[str, Any] = {
    "train_micro_batch_size_per_gpu": BATCH,
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,
}


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def _raw_step(x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    import deepspeed

    model = make_model()
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        config=RAW_CONFIG,
        dist_init_required=False,
    )

    def step() -> None:
        engine.backward(F.cross_entropy(engine(x), y))
        engine.step()

    return step


def _fabric_step(x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    from fabric_core import Fabric, spec

    fabric = Fabric(accelerator="cpu", devices=WORLD_SIZE, strategy=spec("deepspeed", stage=2))
    fabric.launch()
    model = make_model()
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))

    def step() -> None:
        fabric.backward(F.cross_entropy(model(x), y))
        optimizer.step()
        optimizer.zero_grad()

    return step


def _worker(rank: int, port: int, quick: bool, rows: list[str], out: str) -> None:
    act_as_torchrun_rank(rank, WORLD_SIZE, port)
    os.environ["DS_ACCELERATOR"] = "cpu"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    import warnings

    warnings.simplefilter("ignore")
    import deepspeed

    deepspeed.utils.logging.logger.setLevel(logging.WARNING)
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, WIDTH, generator=generator)
    y = torch.randint(0, 10, (BATCH,), generator=generator)
    steps: dict[str, Callable[[], None]] = {RAW: _raw_step(x, y)}
    note = f"ZeRO stage 2, AdamW, cpu; {STEPS_PER_BLOCK} steps per timed block."
    try:
        steps[CORE] = _fabric_step(x, y)
    except Exception as exc:  # a plugin that is not installed must not stop the raw row
        note += f" fabric-core skipped: {type(exc).__name__}: {exc}"
    results: list[RowResult] = []
    if "deepspeed_steps" in rows:
        barrier = dist.barrier
        measures = {
            name: (lambda s=step: time_block(s, STEPS_PER_BLOCK, before=barrier)) for name, step in steps.items()
        }
        results.append(
            row_result(
                "deepspeed_steps",
                f"DeepSpeed ZeRO-2 2 processes steps/s, MLP {DEPTH}x{WIDTH}, batch {BATCH} per process",
                # Two processes on two cores: as noisy as the FSDP row, so as many rounds.
                interleave(measures, rounds=12 if quick else 40, seed=7),
                metric="rate",
                goal=Goal(">=", 0.97),
                labels={
                    RAW: "deepspeed.initialize(config=ZeRO-2) + engine.backward/step",
                    CORE: 'spec("deepspeed", stage=2) + fabric.backward, optimizer.step',
                },
                note=note,
            )
        )
    steps.clear()
    hand_back(rank, out, results)


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Spawn two processes and measure the DeepSpeed row in them.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        ``deepspeed_steps`` when selected and DeepSpeed is installed.
    """
    return spawn_rows(_worker, WORLD_SIZE, quick, rows, ROWS)


if __name__ == "__main__":
    run_as_script("bench/bench_deepspeed.py", __doc__.splitlines()[0], collect)
