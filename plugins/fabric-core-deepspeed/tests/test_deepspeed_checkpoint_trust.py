"""DeepSpeed checkpoint folders carrying real payloads, loaded by two real CPU processes and consolidated.

This file, run as a script, is a two-rank ``deepspeed_stage_2`` job: it saves a folder, rank 0 plants a
payload (a pickle that runs ``touch PWNED.<pid>``) in copies of its model-states and optimizer-states files,
and every rank loads each copy with ``fabric.load``. The payload must run on no rank, unless the caller
passes ``weights_only=False``.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabric_core.testing.payloads import executions, plant_in_torch_file

pytestmark = [pytest.mark.deepspeed, pytest.mark.multiprocess, pytest.mark.timeout(200)]

JOB_TIMEOUT = 180
PLANTED = {"model_states": "mp_rank_00_model_states.pt", "optim_states": "zero_pp_rank_1_mp_rank_00_optim_states.pt"}


def set_up(fabric: Any, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    module = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    model, optimizer = fabric.setup(module, torch.optim.Adam(module.parameters(), lr=0.05))
    return {"model": model, "optimizer": optimizer, "step": 0}


def record(function: Any) -> dict[str, Any] | None:
    try:
        function()
    except Exception as error:
        return {"type": type(error).__name__, "path": getattr(error, "path", None), "message": str(error)}
    return None


def worker(fabric: Any, out_dir: str) -> None:
    from fabric_core_deepspeed import consolidate

    root = Path(out_dir)
    state = set_up(fabric, seed=0)
    fabric.backward(state["model"](torch.randn(4, 4)).sum(), model=state["model"])
    state["optimizer"].step()
    state["step"] = 1
    fabric.save(root / "clean", state)
    if fabric.global_rank == 0:
        for case, file in PLANTED.items():
            shutil.copytree(root / "clean", root / case)
            plant_in_torch_file(root / case / "checkpoint" / file, "payload", root / "PWNED")
        shutil.copytree(root / "clean", root / "trusted")
        plant_in_torch_file(root / "trusted" / "checkpoint" / PLANTED["model_states"], "payload", root / "TRUSTED")
    fabric.barrier()
    seen: dict[str, Any] = {}
    target = set_up(fabric, seed=1)
    for case in PLANTED:
        seen[case] = record(lambda case=case: fabric.load(root / case, target))
        fabric.barrier()
    if fabric.global_rank == 0:
        seen["consolidate"] = record(lambda: consolidate(root / "model_states", root / "out.pt"))
        seen["consolidate_clean"] = sorted(torch.load(consolidate(root / "clean"), weights_only=True))
    fabric.load(root / "clean", target)
    seen["clean_step"] = target["step"]
    target["step"] = 0
    fabric.load(root / "trusted", target, weights_only=False)
    seen["trusted_step"] = target["step"]
    Path(out_dir, f"rank{fabric.global_rank}.json").write_text(json.dumps(seen))


def main(out_dir: str) -> None:
    from fabric_core import Fabric, spec

    strategy = spec("deepspeed_stage_2", timeout=timedelta(seconds=60))
    fabric = Fabric(accelerator="cpu", strategy=strategy, devices=2)
    fabric.launch()  # DeepSpeed's default launcher: this script runs again as local rank 1
    worker(fabric, out_dir)


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deepspeed_trust")


@pytest.fixture(scope="module")
def seen(out_dir: Path, run_job: Any) -> list[dict[str, Any]]:
    return run_job(__file__, out_dir, JOB_TIMEOUT)


@pytest.mark.parametrize("case", list(PLANTED))
def test_no_rank_runs_a_payload_in_a_deepspeed_folder(seen: list[dict[str, Any]], out_dir: Path, case: str) -> None:
    assert executions(out_dir / "PWNED") == 0
    for rank in seen:
        error = rank[case]
        assert error is not None, f"a rank loaded the folder with a payload in its {case} file"
        assert error["type"] == "UnsafeCheckpointError"
        assert error["path"] == str(out_dir / case / "checkpoint" / PLANTED[case])
        assert "posix.system" in error["message"] and "weights_only=False" in error["message"]


def test_a_deepspeed_folder_under_a_single_device_strategy_is_not_unpickled(
    seen: list[dict[str, Any]], out_dir: Path
) -> None:
    from fabric_core import Fabric
    from fabric_core.errors import CheckpointError

    for case in PLANTED:
        with pytest.raises(CheckpointError, match="not a sharded checkpoint"):
            Fabric(accelerator="cpu", devices=1).load(out_dir / case)
    assert executions(out_dir / "PWNED") == 0


def test_consolidate_refuses_a_payload(seen: list[dict[str, Any]], out_dir: Path) -> None:
    error = seen[0]["consolidate"]
    assert error is not None and error["type"] == "UnsafeCheckpointError" and "posix.system" in error["message"]
    assert not (out_dir / "out.pt").exists()
    assert executions(out_dir / "PWNED") == 0
    assert seen[0]["consolidate_clean"] == ["model", "step"]


def test_legitimate_and_trusted_folders_still_load(seen: list[dict[str, Any]], out_dir: Path) -> None:
    for rank in seen:
        assert rank["clean_step"] == 1 and rank["trusted_step"] == 1
    # weights_only=False hands the folder to DeepSpeed as it is: the payload there ran, on both ranks at least
    # (DeepSpeed 0.19 reads the model-states file twice per rank: 4 runs).
    assert executions(out_dir / "TRUSTED") >= 2


if __name__ == "__main__":
    main(sys.argv[1])
