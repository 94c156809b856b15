"""A ``fabric.save_raw`` killed at any moment never leaves a folder or file that loads as complete with a mix.

A real process saves two different models in turn, over and over, as a Hugging Face folder of many shards and
as one ``.safetensors`` file, and is killed (SIGKILL) at random moments. After each kill the folder loads as one
of the two models exactly, or is refused as incomplete; the single file always loads as one of the two. The
next save removes what the killed one left behind.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from fabric_core import Fabric
from fabric_core.errors import CheckpointError

pytestmark = [pytest.mark.kill_resume, pytest.mark.multiprocess, pytest.mark.timeout(300)]

SAVER = """
import sys, torch
from torch import nn
from fabric_core import Fabric

def make(seed):
    torch.manual_seed(seed)
    return nn.Sequential(*(nn.Linear(128, 128) for _ in range(24)))

fabric = Fabric(accelerator="cpu", devices=1)
models = [make(0), make(1)]
out = sys.argv[1]
for turn in range(int(sys.argv[2])):
    model = models[turn % 2]
    fabric.save_raw(out + "/folder", model, max_shard_size=200_000)
    fabric.save_raw(out + "/one.safetensors", model)
    print(f"saved {turn}", flush=True)
"""


def make(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*(nn.Linear(128, 128) for _ in range(24)))


def which(fabric: Fabric, path: Path, references: list[dict[str, torch.Tensor]]) -> int:
    """The index of the reference ``path`` loads as (a load that is neither fails the test)."""
    model = make(2)
    fabric.load_raw(path, model)
    state = model.state_dict()
    matches = [i for i, ref in enumerate(references) if all(torch.equal(state[k], v) for k, v in ref.items())]
    assert len(matches) == 1, f"{path} loaded as a mix of two saves"
    return matches[0]


def test_a_killed_save_leaves_the_previous_weights_or_an_incomplete_folder_never_a_mix(tmp_path: Path) -> None:
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    fabric = Fabric(accelerator="cpu", devices=1)
    references = [make(0).state_dict(), make(1).state_dict()]
    rng = random.Random(0)
    outcomes: list[str] = []
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), "1000"],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().startswith("saved")  # one complete save first
            time.sleep(rng.uniform(0.0, 0.25))
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        which(fabric, tmp_path / "one.safetensors", references)
        try:
            outcomes.append(f"model {which(fabric, tmp_path / 'folder', references)}")
        except (FileNotFoundError, CheckpointError) as err:
            outcomes.append(f"refused: {type(err).__name__}")
    assert any(o.startswith("model") for o in outcomes), outcomes

    # A complete save afterwards loads, and sweeps what the killed savers left behind.
    fabric.save_raw(tmp_path / "folder", make(0), max_shard_size=200_000)
    fabric.save_raw(tmp_path / "one.safetensors", make(0))
    assert which(fabric, tmp_path / "folder", references) == 0
    assert which(fabric, tmp_path / "one.safetensors", references) == 0
    assert not [p.name for p in (tmp_path / "folder").iterdir() if p.name.startswith(".")]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".one.safetensors")]
