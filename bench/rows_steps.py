"""Training steps per second on one CPU process, and the cost of building a ``Fabric``.

Every variant trains its own copy of the same model on the same batch, in the loop its documentation
shows: raw PyTorch (``torch.autocast`` around forward and loss for ``bf16-mixed``), fabric-core and
Lightning Fabric (``fabric.setup`` + ``fabric.backward``), Accelerate (``prepare`` + ``backward``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from _harness import ACCELERATE, CORE, LIGHTNING, RAW, Goal, RowResult, interleave, row_result, time_block
from torch import nn

__all__ = ["collect"]

#: Each timed block lasts about this long: long enough to span scheduler hiccups, short enough to interleave.
BLOCK_SECONDS = 0.04
_STEP_ROWS = {
    # key: (model name, precision, goal)
    "steps_tiny_fp32": ("tiny", "32-true", Goal(">=", 0.97)),
    "steps_tiny_bf16": ("tiny", "bf16-mixed", Goal(">=", 0.95)),
    "steps_mlp_fp32": ("mlp", "32-true", Goal(">=", 0.98)),
    "steps_mlp_bf16": ("mlp", "bf16-mixed", Goal(">=", 0.97)),
}
_TITLES = {
    "tiny": "tiny model Linear(32, 2), batch 4",
    "mlp": "MLP 784-256-10, batch 64",
}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _model(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    if name == "tiny":
        model: nn.Module = nn.Linear(32, 2)
        x = torch.randn(4, 32, generator=generator)
        y = torch.randint(0, 2, (4,), generator=generator)
    else:
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        x = torch.randn(64, 784, generator=generator)
        y = torch.randint(0, 10, (64,), generator=generator)
    return model, x, y


def _raw_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if precision == "bf16-mixed":

        def step() -> None:
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()

        return step

    def step_fp32() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    return step_fp32


#: A diagnostic variant of the mixed-precision rows: raw PyTorch plus the two casts the Fabric API
#: defines around a forward (floating inputs to the autocast dtype, floating outputs back to float32).
#: Its ratio is what those casts cost in the loop a user writes (fabric-core, which enters an autocast it
#: checked once instead of building one per step, can read above it).
RAW_CASTS = "raw + API casts"


def _raw_casts_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            output = model(x.to(dtype=torch.bfloat16))
        loss = F.cross_entropy(output.to(dtype=torch.float32), y)
        loss.backward()
        optimizer.step()

    return step


def _fabric_step(fabric: Any, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """The Lightning Fabric loop; fabric-core and Lightning Fabric share its API."""
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))

    def step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        fabric.backward(loss)
        optimizer.step()

    return step


def _reset_accelerate() -> None:
    # Accelerate keeps one process-wide state; a second Accelerator with other settings must start afresh.
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def _accelerate_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: str) -> Callable[[], None]:
    from accelerate import Accelerator

    _reset_accelerate()
    accelerator = Accelerator(cpu=True, mixed_precision="bf16" if precision == "bf16-mixed" else "no")
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))

    def step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()

    return step


def _repeat_for(step: Callable[[], None]) -> int:
    """How many calls of ``step`` fill one block of about :data:`BLOCK_SECONDS`."""
    for _ in range(3):
        step()
    per_call = time_block(step, 10)
    return max(5, int(BLOCK_SECONDS / max(per_call, 1e-7)))


def _interleave_steps(
    steps: dict[str, Callable[[], None]], quick: bool, seed: int
) -> tuple[dict[str, list[float]], int]:
    """Time every step function in blocks sized by the raw one's speed, interleaved; the values and block size."""
    repeat = _repeat_for(steps[RAW])
    measures = {name: (lambda s=step: time_block(s, repeat)) for name, step in steps.items()}
    return interleave(measures, rounds=10 if quick else 30, seed=seed), repeat


def _step_row(key: str, quick: bool) -> RowResult:
    model_name, precision, goal = _STEP_ROWS[key]
    base, x, y = _model(model_name)
    steps: dict[str, Callable[[], None]] = {RAW: _raw_step(copy.deepcopy(base), x, y, precision)}
    if precision == "bf16-mixed":
        steps[RAW_CASTS] = _raw_casts_step(copy.deepcopy(base), x, y)
    from fabric_core import Fabric

    steps[CORE] = _fabric_step(Fabric(accelerator="cpu", devices=1, precision=precision), copy.deepcopy(base), x, y)
    if _installed("lightning_fabric"):
        from lightning_fabric import Fabric as LightningFabric

        lightning = LightningFabric(accelerator="cpu", devices=1, precision=precision)  # type: ignore[arg-type]
        steps[LIGHTNING] = _fabric_step(lightning, copy.deepcopy(base), x, y)
    if _installed("accelerate"):
        steps[ACCELERATE] = _accelerate_step(copy.deepcopy(base), x, y, precision)
    values, repeat = _interleave_steps(steps, quick, seed=2)
    result = row_result(
        key,
        f"steps/s {_TITLES[model_name]}, {precision}",
        values,
        metric="rate",
        goal=goal,
        note=f"SGD; {repeat} steps per timed block; absolute values are seconds per step.",
    )
    floor = result.ratios.get(RAW_CASTS)
    if floor is None:
        return result
    # Said in the note: the table's columns are the frameworks.
    return dataclasses.replace(
        result,
        note=result.note
        + f" Raw PyTorch with the casts the Fabric API defines (inputs to bf16, outputs to fp32) reaches {floor.fmt()}"
        " of raw: what the casts cost (fabric-core saves torch.autocast's per-step checks, so it may read above).",
    )


def _construct_row(quick: bool) -> RowResult:
    from fabric_core import Fabric

    base, x, y = _model("mlp")
    raw_step = _raw_step(base, x, y, "32-true")
    builds: dict[str, Callable[[], object]] = {CORE: lambda: Fabric(accelerator="cpu")}
    labels = {RAW: "one raw MLP 784-256-10 training step", CORE: 'Fabric(accelerator="cpu")'}
    if _installed("lightning_fabric"):
        from lightning_fabric import Fabric as LightningFabric

        builds[LIGHTNING] = lambda: LightningFabric(accelerator="cpu", devices=1)
        labels[LIGHTNING] = 'lightning_fabric.Fabric(accelerator="cpu", devices=1)'
    if _installed("accelerate"):
        from accelerate import Accelerator

        _reset_accelerate()
        builds[ACCELERATE] = lambda: Accelerator(cpu=True)
        labels[ACCELERATE] = "Accelerator(cpu=True)"
    for build in builds.values():  # the first one pays for imports and plugin discovery: not measured
        build()
    step_repeat = _repeat_for(raw_step)
    measures = {RAW: lambda: time_block(raw_step, step_repeat)}
    for name, build in builds.items():
        measures[name] = lambda b=build: time_block(b, 20)
    values = interleave(measures, rounds=10 if quick else 30, seed=3)
    return row_result(
        "construct_warm",
        "warm construction (a `Fabric` after one was built), x one raw MLP training step",
        values,
        goal=Goal("<=", 0.3),
        labels=labels,
        note="Absolute values are seconds per construction (per step for raw).",
    )


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Measure the single-process rows.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        ``construct_warm`` and the ``steps_*`` rows (those selected).
    """
    results = []
    if rows is None or "construct_warm" in rows:
        results.append(_construct_row(quick))
    for key in _STEP_ROWS:
        if rows is None or key in rows:
            results.append(_step_row(key, quick))
    return results
