"""Two processes on gloo (127.0.0.1): DDP training steps and small collectives, raw vs the frameworks.

``torch.multiprocessing`` spawns both processes, which look like a ``torchrun`` job to every framework
(``TORCHELASTIC_RUN_ID``, ``RANK``, ...): raw ``torch.distributed`` creates the process group and each
framework joins that same group, so raw and framework calls are interleaved in the same processes. Both
ranks shuffle the round order with the same seed, so their collectives always match.
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from _harness import ACCELERATE, CORE, LIGHTNING, RAW, Goal, RowResult, interleave, row_result, time_block
from _spawn import act_as_torchrun_rank, hand_back, spawn_rows
from torch import nn

__all__ = ["collect"]

WORLD_SIZE = 2
ROWS = ("ddp_steps", "all_reduce_1", "all_gather_dict3", "flight_recorder", "flight_recorder_call", "collective_check")
STEPS_PER_BLOCK = 20
#: Calls per timed block, about 10 ms each: a single call takes tens to hundreds of microseconds, at the mercy
#: of when the other rank wakes.
REDUCES_PER_BLOCK = 200
GATHERS_PER_BLOCK = 50


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _timed(function: Callable[[], Any], repeat: int) -> float:
    """Seconds per call on this rank, the ranks lined up by a barrier first (see ``time_block``)."""
    return time_block(function, repeat, before=dist.barrier)


def _frameworks(notes: list[str]) -> dict[str, Any]:
    """Every installed framework, set up to join the running process group."""
    out: dict[str, Any] = {}
    try:
        from fabric_core import Fabric

        fabric = Fabric(accelerator="cpu", strategy="ddp", devices=WORLD_SIZE)
        fabric.launch()
        out[CORE] = fabric
    except Exception as exc:  # a plugin that is not installed or not finished must not stop the raw rows
        notes.append(f"fabric-core skipped: {type(exc).__name__}: {exc}")
    if _installed("lightning_fabric"):
        from lightning_fabric import Fabric as LightningFabric

        lightning = LightningFabric(accelerator="cpu", strategy="ddp", devices=WORLD_SIZE)
        lightning.launch()
        out[LIGHTNING] = lightning
    if _installed("accelerate"):
        from accelerate import Accelerator

        out[ACCELERATE] = Accelerator(cpu=True)
    return out


def _ddp_steps(frameworks: dict[str, Any], rank: int) -> dict[str, Callable[[], None]]:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 784, generator=generator)
    y = torch.randint(0, 10, (64,), generator=generator)

    def loop(model: nn.Module, optimizer: Any, backward: Callable[[torch.Tensor], None]) -> Callable[[], None]:
        def step() -> None:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            backward(loss)
            optimizer.step()

        return step

    raw_model = nn.parallel.DistributedDataParallel(copy.deepcopy(base))
    steps = {RAW: loop(raw_model, torch.optim.SGD(raw_model.parameters(), lr=0.01), lambda loss: loss.backward())}
    for name, framework in frameworks.items():
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        if name == ACCELERATE:
            model, optimizer = framework.prepare(model, optimizer)
        else:
            model, optimizer = framework.setup(model, optimizer)
        steps[name] = loop(model, optimizer, framework.backward)
    return steps


def _all_reduce(frameworks: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    tensor = torch.ones(1)
    calls: dict[str, Callable[[], Any]] = {RAW: lambda: dist.all_reduce(tensor)}
    for name, framework in frameworks.items():
        if name == ACCELERATE:
            calls[name] = lambda f=framework: f.reduce(tensor, reduction="sum")
        else:
            calls[name] = lambda f=framework: f.all_reduce(tensor, reduce_op="sum")
    return calls


def _all_gather(frameworks: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    data = {"loss": torch.rand(1), "logits": torch.rand(8, 10), "labels": torch.arange(8)}

    def raw() -> dict[str, torch.Tensor]:
        gathered = {}
        for key, tensor in data.items():
            parts = [torch.empty_like(tensor) for _ in range(WORLD_SIZE)]
            dist.all_gather(parts, tensor)
            gathered[key] = torch.stack(parts)
        return gathered

    calls: dict[str, Callable[[], Any]] = {RAW: raw}
    for name, framework in frameworks.items():
        if name == ACCELERATE:
            calls[name] = lambda f=framework: f.gather(data)
        else:
            calls[name] = lambda f=framework: f.all_gather(data)
    return calls


def _core_switches(fabric: Any, rank: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """fabric-core with its diagnostics off (RAW) and on (CORE), both sides fabric-core's.

    ``flight_recorder``: a DDP step that also reduces its loss (``fabric.all_reduce``), with the recorder
    replaced by a function that keeps nothing, against the real one (always on in use);
    ``flight_recorder_call``: the same for ``fabric.all_reduce`` of one element alone, the worst case;
    ``collective_check``: ``FABRIC_CORE_CHECK_COLLECTIVES`` off against on (set here as the switch's reader
    sets it). Both ranks switch together: they run the rounds in the same order.
    """
    from fabric_core._distributed import collective_check, flight_recorder

    real_record = flight_recorder.record
    tensor = torch.ones(1)
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    model, optimizer = fabric.setup(base, torch.optim.SGD(base.parameters(), lr=0.01))
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 784, generator=generator)
    y = torch.randint(0, 10, (64,), generator=generator)

    def step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        fabric.all_reduce(loss.detach(), reduce_op="mean")

    def reduce() -> None:
        fabric.all_reduce(tensor, reduce_op="sum")

    def switched(call: Callable[[], None], record: Callable[..., Any], check: bool) -> Callable[[], None]:
        def run() -> None:
            flight_recorder.record, collective_check.checking = record, check
            try:
                call()
            finally:
                flight_recorder.record, collective_check.checking = real_record, False

        return run

    def nothing(*_: Any) -> None:
        return None

    return {
        "flight_recorder": {RAW: switched(step, nothing, False), CORE: switched(step, real_record, False)},
        "flight_recorder_call": {RAW: switched(reduce, nothing, False), CORE: switched(reduce, real_record, False)},
        "collective_check": {RAW: switched(reduce, real_record, False), CORE: switched(reduce, real_record, True)},
    }


def _worker(rank: int, port: int, quick: bool, rows: list[str], out: str) -> None:
    act_as_torchrun_rank(rank, WORLD_SIZE, port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    import warnings

    warnings.simplefilter("ignore")
    notes: list[str] = []
    frameworks = _frameworks(notes)
    note = " ".join(notes)
    rounds = 6 if quick else 40
    results: list[RowResult] = []
    if "ddp_steps" in rows:
        steps = _ddp_steps(frameworks, rank)
        measures = {name: (lambda s=step: _timed(s, STEPS_PER_BLOCK)) for name, step in steps.items()}
        results.append(
            row_result(
                "ddp_steps",
                "DDP 2 processes steps/s, MLP 784-256-10, batch 64 per process",
                # Two ranks on two cores: a block's time swings by 2x with scheduling, so three times the rounds.
                interleave(measures, rounds=3 * rounds, seed=4),
                metric="rate",
                goal=Goal(">=", 0.99),
                labels={RAW: "DistributedDataParallel(model)"},
                note=f"gloo on 127.0.0.1; {STEPS_PER_BLOCK} steps per timed block. {note}".strip(),
            )
        )
    if "all_reduce_1" in rows:
        calls = _all_reduce(frameworks)
        measures = {name: (lambda c=call: _timed(c, REDUCES_PER_BLOCK)) for name, call in calls.items()}
        results.append(
            row_result(
                "all_reduce_1",
                "all_reduce of 1 element (sum), time",
                interleave(measures, rounds=3 * rounds, seed=5),
                goal=Goal("<=", 1.1),
                labels={RAW: "dist.all_reduce(t)", CORE: 'fabric.all_reduce(t, reduce_op="sum")'},
                note=f"{REDUCES_PER_BLOCK} calls per timed block; Accelerate: `reduce(t, 'sum')`. {note}".strip(),
            )
        )
    if "all_gather_dict3" in rows:
        calls = _all_gather(frameworks)
        measures = {name: (lambda c=call: _timed(c, GATHERS_PER_BLOCK)) for name, call in calls.items()}
        results.append(
            row_result(
                "all_gather_dict3",
                "all_gather of a dict of 3 tensors, time",
                interleave(measures, rounds=3 * rounds, seed=6),
                goal=Goal("<=", 1.1),
                labels={RAW: "dist.all_gather per tensor + torch.stack", CORE: "fabric.all_gather(dict)"},
                note=f"{GATHERS_PER_BLOCK} calls per timed block; Accelerate: `gather(dict)`. {note}".strip(),
            )
        )
    diagnostics = ("flight_recorder", "flight_recorder_call", "collective_check")
    if CORE in frameworks and set(diagnostics) & set(rows):
        switches = _core_switches(frameworks[CORE], rank)
        described = {
            "flight_recorder": (
                "DDP 2 processes steps/s with fabric.all_reduce(loss): flight recorder on, x off",
                Goal(">=", 0.99),
                "rate",
                STEPS_PER_BLOCK,
                "MLP 784-256-10, batch 64 per process; the recorder replaced by a function that keeps nothing",
                "the same step, the recorder on (as always)",
            ),
            "flight_recorder_call": (
                "fabric.all_reduce of 1 element: flight recorder on, x off, time",
                None,
                "time",
                REDUCES_PER_BLOCK,
                "fabric.all_reduce(t), the recorder replaced by a function that keeps nothing",
                "fabric.all_reduce(t), the recorder on (as always)",
            ),
            "collective_check": (
                "fabric.all_reduce of 1 element with FABRIC_CORE_CHECK_COLLECTIVES=1, x without, time",
                None,
                "time",
                REDUCES_PER_BLOCK,
                "fabric.all_reduce(t), check off",
                "fabric.all_reduce(t), check on (one more small all_gather per call)",
            ),
        }
        for seed, key in enumerate(diagnostics, start=7):
            if key not in rows:
                continue
            title, goal, metric, per_block, raw_label, core_label = described[key]
            measures = {name: (lambda c=call, n=per_block: _timed(c, n)) for name, call in switches[key].items()}
            results.append(
                row_result(
                    key,
                    title,
                    interleave(measures, rounds=3 * rounds, seed=seed),
                    metric=metric,
                    goal=goal,
                    labels={RAW: raw_label, CORE: core_label},
                    note=f"{per_block} calls per timed block, fabric-core on both sides.",
                )
            )
    hand_back(rank, out, results)


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Spawn two processes and measure the DDP rows in them.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        ``ddp_steps``, ``all_reduce_1``, ``all_gather_dict3``, ``flight_recorder``, ``flight_recorder_call`` and
        ``collective_check`` (those selected).
    """
    return spawn_rows(_worker, WORLD_SIZE, quick, rows, ROWS)
