"""Rank 1 fails first; rank 0 fails because of it while rank 1 is still exiting. Prints what was reported.

Usage: python root_cause_job.py FLAG_FILE
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

from torch.multiprocessing.spawn import ProcessRaisedException

from fabric_core.launchers.multiprocessing import MultiProcessingLauncher
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import connect_to_cpus


def work(flag: str) -> None:
    if int(os.environ["LOCAL_RANK"]) == 1:
        atexit.register(time.sleep, 3)  # still exiting when rank 0's error arrives
        Path(flag).write_text("failed")
        raise RuntimeError("rank 1 is the cause")
    deadline = time.monotonic() + 30
    while not Path(flag).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    raise RuntimeError("rank 0 failed because rank 1 did")


if __name__ == "__main__":
    strategy = connect_to_cpus(ParallelStrategy())
    try:
        MultiProcessingLauncher(strategy, start_method="spawn").launch(work, sys.argv[1])
    except ProcessRaisedException as error:
        cause = "cause" if "rank 1 is the cause" in str(error) else "consequence"
        print("reported", error.error_index, cause)
