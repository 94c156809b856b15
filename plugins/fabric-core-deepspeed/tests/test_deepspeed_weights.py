"""``fabric.save_raw`` and safetensors ``fabric.load_raw`` under DeepSpeed on two processes (ZeRO 1 and 3).

Run as a script (``python test_deepspeed_weights.py OUT_DIR STAGE``) it is the job: it trains one step, saves the
module's weights as a Hugging Face folder and as one safetensors file, loads the folder into a model of another
seed and saves that again; the test reads every file back with the ``safetensors`` package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.deepspeed, pytest.mark.multiprocess, pytest.mark.timeout(300)]


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def job(out_dir: Path, stage: int) -> None:
    from fabric_core import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy=f"deepspeed_stage_{stage}")
    fabric.launch()
    model = make_model(0)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    fabric.backward(model(torch.randn(4, 4)).square().sum(), model=model)
    optimizer.step()
    fabric.save_raw(out_dir / "folder", model, max_shard_size=100)
    fabric.save_raw(out_dir / "one.safetensors", model)
    fresh = make_model(1)
    fresh, _ = fabric.setup(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1))  # an engine needs its optimizer
    result = fabric.load_raw(out_dir / "folder", fresh)
    fabric.save_raw(out_dir / "reloaded.safetensors", fresh)
    (out_dir / f"rank{fabric.global_rank}.json").write_text(json.dumps({"result": list(result)}))


@pytest.mark.parametrize("stage", [1, 3])
def test_weights_go_out_and_come_back_under_zero(stage: int, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from fabric_core.testing import run_in_own_session

    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_") and k not in ("LOCAL_RANK", "RANK")}
    try:
        done = run_in_own_session([sys.executable, __file__, str(tmp_path), str(stage)], 280, env=env)
    except subprocess.TimeoutExpired as timed_out:
        pytest.fail(f"the DeepSpeed job did not finish in time:\n{timed_out.output}")
    assert done.returncode == 0, done.stdout
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(report["result"] == [[], []] for report in reports)
    single = load_file(tmp_path / "one.safetensors")
    assert sorted(single) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert not torch.equal(single["0.weight"], make_model(0).state_dict()["0.weight"])  # the trained weights
    index = json.loads((tmp_path / "folder" / "model.safetensors.index.json").read_text())
    for name, tensor in single.items():
        assert torch.equal(load_file(tmp_path / "folder" / index["weight_map"][name])[name], tensor)
    reloaded = load_file(tmp_path / "reloaded.safetensors")
    assert all(torch.equal(reloaded[name], tensor) for name, tensor in single.items())


if __name__ == "__main__":
    job(Path(sys.argv[1]), int(sys.argv[2]))
