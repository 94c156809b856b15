"""DDP's first backward is reduced in the layout of the buckets DDP rebuilds after it (three real processes).

That is what makes a resumed run with three or more processes bit-identical to the uninterrupted one
(tests/test_resume_world_sizes.py kills real jobs); here the mechanism itself is checked on one job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

JOB = Path(__file__).parent / "_jobs" / "stable_buckets_job.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    outdir = tmp_path_factory.mktemp("stable_buckets")
    environ = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE")}
    result = subprocess.run(
        [sys.executable, str(JOB), str(outdir)], capture_output=True, text=True, timeout=120, env=environ
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return {
        case: [json.loads((outdir / f"{case}-rank{r}.json").read_text()) for r in range(3)]
        for case in ("default", "user_hook")
    }


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_the_first_backward_uses_the_buckets_ddp_rebuilds_in_arrival_order(
    ranks: dict[str, list[dict[str, Any]]],
) -> None:
    for record in ranks["default"]:
        assert record["hook"] == "_FirstBackwardInRebuiltLayout"
        # The model's layers run in another order than they are registered in: the layout follows the
        # order the gradients arrived in (head, late, middle, stem), split at DDP's 1 MiB first bucket.
        assert record["first_layout"] == record["rebuilt_layout"]
        assert [name for group in record["first_layout"] for name in group] == [
            f"{layer}.{kind}" for layer in ("head", "late", "middle", "stem") for kind in ("bias", "weight")
        ]
        assert len(record["first_layout"]) > 1
        # Each gradient landed back on its own parameter: the mean of the ranks' own gradients.
        assert record["first_error"] < 1e-6


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_a_comm_hook_the_user_registers_after_setup_takes_precedence(
    ranks: dict[str, list[dict[str, Any]]],
) -> None:
    for record in ranks["user_hook"]:
        assert record["hook"] is None and record["hook_name"] == "fp16_compress_hook"
        assert 1e-6 < record["first_error"] < 1e-3  # fp16's rounding: the user's hook did the reducing
