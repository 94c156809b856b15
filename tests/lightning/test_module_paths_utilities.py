"""The core modules behind Lightning's utility paths that hold only private helpers there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save


def test_optimizer_state_moves_but_step_stays() -> None:
    from fabric_core.utilities.optimizer import _optimizers_to_device

    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    state = next(iter(optimizer.state.values()))
    step = state["step"]
    _optimizers_to_device([optimizer], "meta")
    assert state["exp_avg"].device.type == "meta" and state["exp_avg_sq"].device.type == "meta"
    assert state["step"] is step and step.device.type == "cpu"


@pytest.mark.slow
def test_python_m_consolidate_checkpoint_as_lightnings(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    dcp_save({"model": {"w": torch.arange(6.0)}}, checkpoint_id=folder, no_dist=True)
    command = [sys.executable, "-m", "fabric_core.utilities.consolidate_checkpoint"]
    done = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = folder.with_name("ckpt.consolidated")
    assert torch.equal(torch.load(out, weights_only=True)["model"]["w"], torch.arange(6.0))
    # --output_file, Lightning's spelling; an existing file is never overwritten
    again = subprocess.run(
        [*command, str(folder), "--output_file", str(out)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode != 0 and str(out) in again.stderr


def test_version_flags_read_the_installed_torch() -> None:
    from fabric_core.utilities import imports

    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    assert ((major, minor) >= (2, 6)) == imports._TORCH_GREATER_EQUAL_2_6
    assert ((major, minor) <= (2, 6)) == imports._TORCH_LESS_EQUAL_2_6
    assert sys.platform.startswith("win") == imports._IS_WINDOWS
