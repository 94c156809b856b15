"""`examples/train_classifier.py --logger ... --progress`: a tracker plugin chosen by name and the bar."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fabric_core.testing import fake_distribution

pytestmark = pytest.mark.examples

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_classifier.py"


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_wandb_logger_and_progress_bar(tmp_path: Path) -> None:
    wandb_plugin = ROOT / "plugins" / "fabric-core-wandb"
    entry = {"wandb": "fabric_core_wandb._plugin"}
    with fake_distribution("fabric-core-wandb", entry_points=entry, root=tmp_path / "dist") as folder:
        skip = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_RANK", "RANK", "WANDB_", "PYTHONUNBUFFERED")
        env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
        env.update(WANDB_SILENT="true", WANDB_CONSOLE="off", WANDB_DISABLE_GIT="true", WANDB_DISABLE_CODE="true")
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(wandb_plugin), os.environ.get("PYTHONPATH", "")])
        out = tmp_path / "out"
        command = [sys.executable, str(EXAMPLE), "--epochs", "1", "--logger", "wandb", "--progress", "--out", str(out)]
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=140)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    # The bar's last line: every step of the epoch, and the metrics the script logged.
    last = [line for line in done.stdout.splitlines() if line.startswith("epoch 0/1 | step ")][-1]
    assert re.match(r"epoch 0/1 \| step 64/64 \| \S+ it/s \| \S+<00:00 \| train/loss=\S+ val/accuracy=0\.9\d*$", last)
    (run,) = (out / "wandb").glob("offline-run-*")  # one offline run, with its record file
    assert list(run.glob("run-*.wandb"))
