"""FSDP on two processes (gloo, 127.0.0.1): fabric-core's ``fsdp`` strategy against raw FSDP2, and memory vs DDP.

Run alone (``python bench/bench_fsdp.py [--quick] [--json PATH]``) or through ``bench/run.py``, which calls
:func:`collect`. ``torch.multiprocessing`` spawns both processes, which look like a ``torchrun`` job
(``TORCHELASTIC_RUN_ID``, ``RANK``, ...): raw ``torch.distributed`` creates the process group, and Fabric
joins it, so raw and fabric-core steps are interleaved in the same processes (see ``_harness.py``).

Rows:

* ``fsdp_steps``: training steps per second of the same MLP sharded per block with ``fully_shard``, raw
  (``fully_shard`` + a plain loop) vs ``Fabric(strategy=spec("fsdp", auto_wrap_policy={Block}))``.
* ``fsdp_memory``: bytes each rank holds for parameters, gradients and optimizer state after a step (the
  local tensors: each rank's shards): raw ``DistributedDataParallel`` (the reference, a full replica) vs raw
  FSDP2 vs fabric-core's fsdp. All variants live in the same processes, so an allocator peak could not
  tell them apart; the bytes of their tensors can.
"""

from __future__ import annotations

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
ROWS = ("fsdp_steps", "fsdp_memory")
RAW_FSDP = "raw fsdp2"
WIDTH, DEPTH, BATCH = 512, 4, 64
STEPS_PER_BLOCK = 10


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(Block() for _ in range(DEPTH)), nn.Linear(WIDTH, 10))


def _local_bytes(tensors: list[torch.Tensor]) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def _state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """Bytes this rank holds for parameters, gradients and optimizer state."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    states = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return float(_local_bytes(params) + _local_bytes(grads) + _local_bytes(states))


def _loop(
    model: nn.Module, optimizer: Any, backward: Callable[[torch.Tensor], None], x: Any, y: Any
) -> Callable[[], None]:
    def step() -> None:
        optimizer.zero_grad()
        backward(F.cross_entropy(model(x), y))
        optimizer.step()

    return step


def _variants(
    rank: int, device: torch.device, notes: list[str]
) -> dict[str, tuple[nn.Module, Any, Callable[[], None]]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, WIDTH, generator=generator).to(device)
    y = torch.randint(0, 10, (BATCH,), generator=generator).to(device)
    out: dict[str, tuple[nn.Module, Any, Callable[[], None]]] = {}

    mesh = init_device_mesh(device.type, (WORLD_SIZE,))
    raw = make_model().to(device)
    for block in raw[:DEPTH]:
        fully_shard(block, mesh=mesh)
    fully_shard(raw, mesh=mesh)
    raw_optimizer = torch.optim.AdamW(raw.parameters(), lr=1e-3)
    out[RAW_FSDP] = (raw, raw_optimizer, _loop(raw, raw_optimizer, lambda loss: loss.backward(), x, y))

    ddp = nn.parallel.DistributedDataParallel(make_model().to(device))
    ddp_optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    out[RAW] = (ddp, ddp_optimizer, _loop(ddp, ddp_optimizer, lambda loss: loss.backward(), x, y))
    try:
        from fabric_core import Fabric, spec

        fabric = Fabric(accelerator=device.type, strategy=spec("fsdp", auto_wrap_policy={Block}), devices=WORLD_SIZE)
        fabric.launch()
        model = fabric.setup_module(make_model())
        optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-3))
        out[CORE] = (model, optimizer, _loop(model, optimizer, fabric.backward, x, y))
    except Exception as exc:  # a plugin that is not installed must not stop the raw rows
        notes.append(f"fabric-core skipped: {type(exc).__name__}: {exc}")
    return out


def _worker(rank: int, port: int, quick: bool, rows: list[str], out: str) -> None:
    act_as_torchrun_rank(rank, WORLD_SIZE, port)
    torch.set_num_threads(1)
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= WORLD_SIZE
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=WORLD_SIZE)
    import warnings

    warnings.simplefilter("ignore")
    notes: list[str] = []
    variants = _variants(rank, device, notes)
    note = " ".join(notes)
    rounds = 12 if quick else 40  # two processes on two cores: the noisiest row, so the most rounds
    results: list[RowResult] = []
    barrier = dist.barrier
    if "fsdp_steps" in rows:
        # The raw reference of this row is raw FSDP2; DDP is measured in the memory row only.
        steps = {RAW if name == RAW_FSDP else name: v[2] for name, v in variants.items() if name != RAW}
        measures = {
            name: (lambda s=step: time_block(s, STEPS_PER_BLOCK, before=barrier)) for name, step in steps.items()
        }
        results.append(
            row_result(
                "fsdp_steps",
                f"FSDP 2 processes steps/s, MLP {DEPTH}x{WIDTH}, AdamW, batch {BATCH} per process",
                interleave(measures, rounds=rounds, seed=7),
                metric="rate",
                goal=Goal(">=", 0.97),
                labels={
                    RAW: "fully_shard per block + root, plain loop",
                    CORE: 'spec("fsdp", auto_wrap_policy={Block})',
                },
                note=f"{device.type}; {STEPS_PER_BLOCK} steps per timed block. {note}".strip(),
            )
        )
    if "fsdp_memory" in rows:
        for _, _, step in variants.values():
            step()  # every optimizer has its state now
        measures = {name: (lambda v=v: _state_bytes(v[0], v[1]) / 2**20) for name, v in variants.items()}
        results.append(
            row_result(
                "fsdp_memory",
                "Memory per rank: parameters + gradients + AdamW state, vs DDP's full replica",
                interleave(measures, rounds=1, seed=8, warmup=0),
                metric="memory",
                unit="MiB",
                goal=Goal("<=", 0.55),
                labels={RAW: "DistributedDataParallel", RAW_FSDP: "fully_shard, no Fabric"},
                note=f"{device.type}; bytes of each rank's local tensors. {note}".strip(),
            )
        )
    variants.clear()
    hand_back(rank, out, results)


def collect(quick: bool, rows: set[str] | None = None) -> list[RowResult]:
    """Spawn two processes and measure the FSDP rows in them.

    Args:
        quick: Fewer rounds.
        rows: Row keys to measure (``None``: all of this module's).

    Returns:
        ``fsdp_steps`` and ``fsdp_memory`` (those selected).
    """
    return spawn_rows(_worker, WORLD_SIZE, quick, rows, ROWS)


if __name__ == "__main__":
    run_as_script("bench/bench_fsdp.py", __doc__.splitlines()[0], collect)
