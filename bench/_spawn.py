"""Rows measured in several processes: ranks that look like a ``torchrun`` job, rank 0's rows collected.

``torch.multiprocessing`` spawns the ranks. Each calls :func:`act_as_torchrun_rank` first, so that raw
``torch.distributed`` and every framework find the same job (``TORCHELASTIC_RUN_ID``, ``RANK``, ...), and
rank 0 writes its rows to the JSON path the worker was given.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp
from _harness import CORE, RAW, RowResult

__all__ = ["act_as_torchrun_rank", "hand_back", "run_as_script", "spawn_rows"]

#: ``worker(rank, port, quick, rows, out)``: measures ``rows`` in a job of ranks meeting on ``port``.
Worker = Callable[[int, int, bool, list[str], str], None]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def act_as_torchrun_rank(rank: int, world_size: int, port: int) -> None:
    """Set the environment ``torchrun`` gives rank ``rank`` of a one-node job on 127.0.0.1:``port``."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        GROUP_RANK="0",
        NODE_RANK="0",
        TORCHELASTIC_RUN_ID="bench",
    )


def hand_back(rank: int, out: str, rows: list[RowResult]) -> None:
    """End a worker: rank 0 writes its rows for :func:`spawn_rows`, then every rank leaves the process group.

    Drop the objects that hold the process group (DDP, FSDP or DeepSpeed modules) before calling this.
    """
    if rank == 0:
        Path(out).write_text(json.dumps([row.as_dict() for row in rows]))
    dist.barrier()
    dist.destroy_process_group()


def spawn_rows(
    worker: Worker, world_size: int, quick: bool, rows: set[str] | None, keys: Sequence[str]
) -> list[RowResult]:
    """Run ``worker`` on ``world_size`` spawned ranks and return the rows rank 0 wrote.

    Args:
        worker: Measures the rows it is given in one rank (see :data:`Worker`).
        world_size: How many ranks.
        quick: Fewer rounds.
        rows: The row keys asked for (``None``: all).
        keys: The rows this worker can measure, in order; none of them asked for, nothing is spawned.
    """
    wanted = [key for key in keys if rows is None or key in rows]
    if not wanted:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        args = (_free_port(), quick, wanted, str(out))
        mp.start_processes(worker, args=args, nprocs=world_size, start_method="spawn")
        return [RowResult.from_dict(item) for item in json.loads(out.read_text())]


def run_as_script(prog: str, description: str, collect: Callable[[bool], list[RowResult]]) -> None:
    """The command line of a ``bench_<name>.py`` run alone: ``[--quick] [--json PATH]``, rows printed."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help="Fewer rounds.")
    parser.add_argument("--json", type=Path, help="Also write the rows as JSON here.")
    args = parser.parse_args()
    rows = collect(args.quick)
    for row in rows:
        print(f"\n{row.title}  ({row.rounds} rounds)")
        for name, spread in row.absolute.items():
            ratio = row.ratios.get(name)
            print(
                f"  {name:<12} {spread.fmt(4)} {row.unit if row.metric == 'memory' else 's'}"
                + (f"   ratio to {RAW}: {ratio.fmt(3)}" if ratio is not None else "")
            )
        if row.goal is not None:
            print(f"  goal for {CORE}: {row.goal} -> {'met' if row.passed else 'NOT met'}")
        if row.note:
            print(f"  note: {row.note}")
    if args.json is not None:
        args.json.write_text(json.dumps({"rows": [r.as_dict() for r in rows]}, indent=1))
