"""A light script for `fabric-core run` process tests: no torch, no Fabric, only the worker's life.

Usage: fabric-core run [options] run_worker_job.py OUTDIR MODE
MODE: sleep (write OUTDIR/pid<LOCAL_RANK> and OUTDIR/env<LOCAL_RANK>.json, then sleep until killed) or
exit7 (like sleep, but local rank 1 exits with code 7 once both ranks wrote their pid file).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

outdir, mode = Path(sys.argv[1]), sys.argv[2]
rank = os.environ.get("LOCAL_RANK", "none")
(outdir / f"started{rank}-{os.getpid()}").touch()
keys = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")
(outdir / f"env{rank}.json").write_text(json.dumps({k: os.environ.get(k) for k in keys}))
(outdir / f"pid{rank}").write_text(str(os.getpid()))
if mode == "exit7" and rank == "1":
    while len(list(outdir.glob("pid*"))) < 2:
        time.sleep(0.05)
    (outdir / "failed_at").write_text(repr(time.time()))
    sys.exit(7)
while True:
    time.sleep(0.2)
