"""A process that saves in the background and is killed by the test in the middle of a write.

``python async_save_job.py MODE DIR``; modes:

- ``kill-run``: commits run checkpoint 1, then starts checkpoint 2 with a writer that stops after its first
  bytes (it prints ``WRITING``) and waits to be killed.
- ``kill-plain``: the same with ``fabric.save`` of ``DIR/plain.pt``.
- ``resume``: prints what ``plain.pt`` and the run directory hold, then saves both again and exits without
  waiting (the exit must).

Only this script slows the writer (``torch.save`` is replaced here, in this process); the library is unchanged.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import torch

from fabric_core import Fabric
from fabric_core.io.async_io import AsyncCheckpointIO
from fabric_core.run_checkpoints import RunCheckpoints


def stall_writes() -> None:
    real_save = torch.save

    class Stalling:
        def __init__(self, file: object) -> None:
            self.file = file

        def write(self, data: bytes) -> int:
            written = self.file.write(data)  # type: ignore[attr-defined]
            self.file.flush()  # type: ignore[attr-defined]
            print("WRITING", flush=True)
            threading.Event().wait(120)  # until the test kills this process
            return written

    def stalled_save(obj: object, file: object, *args: object, **kwargs: object) -> None:
        real_save(obj, Stalling(file), *args, **kwargs)

    torch.save = stalled_save  # type: ignore[assignment]


def main() -> None:
    mode, directory = sys.argv[1], Path(sys.argv[2])
    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu", devices=1, plugins=[AsyncCheckpointIO()])
    model = torch.nn.Linear(64, 64)
    state = {"model": model}
    ckpt = RunCheckpoints(fabric, directory / "run", keep_last=None, signals=())

    def fill(value: float) -> None:
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)

    if mode == "resume":
        loaded = fabric.load(directory / "plain.pt")
        print("plain", float(loaded["model"]["weight"][0, 0]), flush=True)
        fill(0.0)
        step = ckpt.resume(state)
        print("resumed", step, float(model.weight[0, 0]), flush=True)
        fill(3.0)
        ckpt.save(3, state)
        fabric.save(directory / "plain.pt", state)
        print("EXITING", flush=True)
        return  # no wait: the exit waits for the write
    fill(1.0)
    if mode == "kill-run":
        ckpt.save(1, state)
        ckpt.wait()
    else:
        fabric.save(directory / "plain.pt", state)
    fabric.strategy.checkpoint_io.teardown()  # waits
    fill(2.0)
    stall_writes()
    if mode == "kill-run":
        ckpt.save(2, state)
    else:
        fabric.save(directory / "plain.pt", state)
    fill(9.0)  # after the snapshot: never written
    print("RETURNED", flush=True)
    time.sleep(120)


if __name__ == "__main__":
    main()
