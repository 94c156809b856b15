"""Only what the run uses is imported: a training loop under fabric-core loads no heavy module the same loop in
plain PyTorch does not, with every plugin of the dev install present.

Each loop runs in a fresh interpreter (``_jobs/startup_imports_job.py``) and reports the module trees it
imported; the tests compare sets, never times (times are measured in ``bench/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fabric_core.environments._env import find_free_network_port

JOB = Path(__file__).parent / "_jobs" / "startup_imports_job.py"
#: Torch's heavy subsystems: allowed only where the raw loop loads them too.
TORCH_HEAVY = {"torch.distributed.checkpoint", "torch.distributed.tensor", "torch._dynamo"}
#: Libraries of plugins this loop does not choose: never imported.
UNCHOSEN = {"deepspeed", "ray", "mlflow", "wandb", "torch_xla", "bitsandbytes"}
#: Registration modules that prove the plugins were present and loaded (the loop would pass vacuously without).
REGISTRATIONS = {f"fabric_core_{name}._plugin" for name in ("xla", "deepspeed", "fsdp", "bitsandbytes", "ray")}
#: Plugins whose implementation modules a cpu run must not import (their registration modules only).
UNCHOSEN_PLUGINS = ("fabric_core_xla", "fabric_core_deepspeed", "fabric_core_fsdp", "fabric_core_bitsandbytes")


def _environment(**extra: str) -> dict[str, str]:
    # A fresh process as a user starts it: no switch that would keep plugins from loading, no rank variables.
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FABRIC_CORE_")
        and k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
    }
    environ.update(extra)
    return environ


def _run(mode: str, outdir: Path, timeout: float = 120) -> None:
    result = subprocess.run(
        [sys.executable, str(JOB), mode, str(outdir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_environment(),
        cwd=outdir,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _report(outdir: Path, mode: str, rank: int = 0) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((outdir / f"{mode}-rank{rank}.json").read_text())
    return report


def _implementation_modules(report: dict[str, Any]) -> list[str]:
    """The modules of unchosen plugins other than their package and registration modules."""
    return [
        m
        for m in report["plugin_modules"]
        if m.startswith(UNCHOSEN_PLUGINS) and m.partition(".")[2] not in ("", "_plugin", "_names")
    ]


def _assert_no_more_than_raw(fabric: dict[str, Any], raw: dict[str, Any]) -> None:
    assert set(fabric["plugin_modules"]) >= REGISTRATIONS, fabric["plugin_modules"]
    assert set(fabric["watched"]) & TORCH_HEAVY <= set(raw["watched"]), (fabric["watched"], raw["watched"])
    assert not set(fabric["watched"]) & UNCHOSEN, fabric["watched"]
    assert _implementation_modules(fabric) == []
    # The raw loop never loads the sharded checkpoint stack; neither does a run that saves single files.
    assert "torch.distributed.checkpoint" not in fabric["watched"]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_single_device_loop_imports_nothing_heavier_than_raw_pytorch(tmp_path: Path) -> None:
    _run("raw", tmp_path)
    _run("fabric", tmp_path)
    raw, fabric = _report(tmp_path, "raw"), _report(tmp_path, "fabric")
    assert raw["stepped"] and raw["plugin_modules"] == []
    assert (fabric["strategy"], fabric["world_size"]) == ("SingleDeviceStrategy", 1)
    assert fabric["stepped"] and fabric["restored"] and fabric["remainder"] == {"step": 1}
    _assert_no_more_than_raw(fabric, raw)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_loading_a_sharded_folder_imports_the_checkpoint_stack_then(tmp_path: Path) -> None:
    # Written by another process, so the loading process meets the folder with nothing of DCP imported.
    write = (
        "import torch, torch.distributed.checkpoint as dcp, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "torch.manual_seed(1)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))\n"
        "dcp.save({'model': m.state_dict()}, checkpoint_id='sharded')\n"
        "print(repr(float(m[0].weight.detach().sum())))\n"
    )
    written = subprocess.run(
        [sys.executable, "-c", write], capture_output=True, text=True, timeout=120, env=_environment(), cwd=tmp_path
    )
    assert written.returncode == 0, written.stderr[-3000:]
    _run("folder", tmp_path)
    report = _report(tmp_path, "folder")
    assert report["weight_sum"] == float(written.stdout.split()[-1])
    assert "torch.distributed.checkpoint" in report["watched"]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_ddp_workers_import_nothing_heavier_than_raw_ddp_workers(tmp_path: Path) -> None:
    port = str(find_free_network_port())
    raw_workers = [
        subprocess.Popen(
            [sys.executable, str(JOB), "raw_ddp", str(tmp_path)],
            env=_environment(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        for worker in raw_workers:
            _, err = worker.communicate(timeout=120)
            assert worker.returncode == 0, err[-3000:]
    finally:
        for worker in raw_workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)
    _run("ddp", tmp_path, timeout=180)
    for rank in (0, 1):
        raw, fabric = _report(tmp_path, "raw_ddp", rank), _report(tmp_path, "ddp", rank)
        assert raw["stepped"]
        assert (fabric["strategy"], fabric["world_size"]) == ("DDPStrategy", 2)
        assert fabric["stepped"] and fabric["restored"] and fabric["remainder"] == {"step": 1}
        _assert_no_more_than_raw(fabric, raw)
