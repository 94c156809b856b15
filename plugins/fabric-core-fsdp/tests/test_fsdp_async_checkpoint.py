"""Sharded background saves (`torch.distributed.checkpoint.async_save`) by real processes, and resharding.

A checkpoint saved in the background by N processes loads on M: 2 -> 1 and 1 -> 2, parameters and Adam state
bit-identical to the state at the save, not to the step taken right after it; a run checkpoint saved
the same way is committed (its marker written by rank 0 after every rank's shards) and resumes on M.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabric_core.run_checkpoints import read_marker

pytestmark = [pytest.mark.kill_resume, pytest.mark.multiprocess, pytest.mark.timeout(180)]


@pytest.mark.parametrize(("saved_by", "loaded_by"), [(2, 1), (1, 2)])
def test_background_sharded_save_loads_on_another_number_of_processes(
    tmp_path: Path, run_job: Any, reports: Any, saved_by: int, loaded_by: int
) -> None:
    run_job("fsdp_async_job.py", "save", saved_by, tmp_path)
    for report in [json.loads((tmp_path / f"save-rank{r}.json").read_text()) for r in range(saved_by)]:
        assert report["async_save_calls"] == ["gloo", "gloo"]  # torch's async_save on a gloo group, twice
        assert report["changed_after_save"] is True
    assert sorted(p.name for p in (tmp_path / "sharded").iterdir()) == [
        ".metadata",
        *(f"__{r}_0.distcp" for r in range(saved_by)),
        "meta.pt",
    ]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    # The run checkpoint was committed after the shards were written (the marker lists them), before the exit.
    marker = read_marker(tmp_path / "run" / "step-00000002")
    assert marker is not None and marker["world_size"] == saved_by
    assert {f"state/__{r}_0.distcp" for r in range(saved_by)} | {"state/.metadata", "state/meta.pt"} == set(
        marker["files"]
    )

    run_job("fsdp_async_job.py", "load", loaded_by, tmp_path)
    for r in range(loaded_by):
        report = json.loads((tmp_path / f"load-rank{r}.json").read_text())
        assert report["world_size"] == loaded_by
        assert report["equal"] == {"model": True, "exp_avg": True, "exp_avg_sq": True}
        assert report["step"] == 2 and report["lr"] == 0.1
        assert report["resumed_step"] == 2
        assert report["resumed_equal"] == {"model": True, "exp_avg": True, "exp_avg_sq": True}
