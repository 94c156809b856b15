"""Ranks that part ways, as users' scripts do by mistake: ``python diverging_job.py MODES RANKS DIR``.

Fabric with ``strategy="ddp"`` on ``RANKS`` CPU processes (the popen launcher runs this script again for
every other rank). After one ``all_reduce`` that every rank makes, the modes (comma-separated) run in turn;
a ``CollectiveMismatchError`` is printed (``rank R raised: ...``) and the next mode runs, since the ranks
raise it together and the process group stays usable:

- ``save-then-barrier``: rank 0 saves, then every rank reaches ``fabric.barrier()`` (Lightning #19780).
- ``save-then-return``: rank 0 saves; the other ranks return from the script.
- ``reduce-vs-gather``: rank 0 calls ``all_reduce``, the others ``all_gather``, on the same tensor.
- ``named-barriers``: rank 0 reaches ``fabric.barrier("eval")``, the others ``fabric.barrier("epoch")``.
- ``stuck-outside``: the last rank sleeps in the script while the others wait in ``fabric.barrier()``.

The lines the tests look for are marked ``# <MODE>``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from fabric_core import Fabric
from fabric_core.errors import CollectiveMismatchError


def say(line: str) -> None:
    """One line in one write: the ranks share the output pipe, and ``print`` writes the line's end apart."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    modes, ranks, directory = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    fabric = Fabric(accelerator="cpu", devices=ranks, strategy="ddp")
    fabric.launch()
    rank = fabric.global_rank
    model = fabric.setup(torch.nn.Linear(2, 2))
    fabric.all_reduce(torch.ones(1))
    say(f"rank {rank} set up")
    for mode in modes.split(","):
        try:
            run(fabric, model, mode, ranks, directory)
        except CollectiveMismatchError as error:
            say(f"rank {rank} raised: {error}")
    say(f"rank {rank} done")


def run(fabric: Fabric, model: torch.nn.Module, mode: str, ranks: int, directory: Path) -> None:
    rank = fabric.global_rank
    if mode == "save-then-barrier":
        if rank == 0:
            fabric.save(directory / "model.pt", {"model": model})  # SAVE_LINE
        fabric.barrier()  # BARRIER_LINE
    elif mode == "save-then-return":
        if rank == 0:
            fabric.save(directory / "model.pt", {"model": model})  # LONE_SAVE_LINE
    elif mode == "reduce-vs-gather":
        if rank == 0:
            fabric.all_reduce(torch.ones(1))  # REDUCE_LINE
        else:
            fabric.all_gather(torch.ones(1))  # GATHER_LINE
    elif mode == "named-barriers":
        fabric.barrier("eval" if rank == 0 else "epoch")  # NAMED_LINE
    elif mode == "stuck-outside":
        if rank == ranks - 1:
            time.sleep(30)  # SLEEP_LINE
        fabric.barrier()  # WAITING_LINE
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
