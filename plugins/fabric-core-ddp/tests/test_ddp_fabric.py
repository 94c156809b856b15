"""Fabric with the DDP strategies on two real CPU processes (gloo on 127.0.0.1).

The jobs in tests/_jobs run as scripts; each rank writes what it saw and the tests read it back, so one job
serves many checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

JOBS = Path(__file__).parent / "_jobs"

pytestmark = pytest.mark.multiprocess


def run_job(
    script: str, *args: str, outdir: Path, timeout: float = 90
) -> tuple[subprocess.CompletedProcess[str], float]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE")}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(JOBS / script), *args, str(outdir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=outdir,
    )
    return result, time.monotonic() - start


def read(outdir: Path, name: str) -> Any:
    return json.loads((outdir / f"{name}.json").read_text())


# -- ddp_spawn: one job, many checks -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def spawn_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    outdir = tmp_path_factory.mktemp("ddp_spawn")
    result, _ = run_job("fabric_spawn_job.py", outdir=outdir)
    assert result.returncode == 0, result.stdout + result.stderr
    return {"ranks": [read(outdir, "rank0"), read(outdir, "rank1")], "parent": read(outdir, "parent"), "dir": outdir}


@pytest.fixture
def ranks(spawn_run: dict[str, Any]) -> list[dict[str, Any]]:
    return spawn_run["ranks"]  # type: ignore[no-any-return]


@pytest.mark.timeout(120)
def test_spawned_workers_start_from_the_parents_random_state(spawn_run: dict[str, Any]) -> None:
    expected = spawn_run["parent"]["expected_draw"]
    assert [r["first_draw"] for r in spawn_run["ranks"]] == [expected, expected]


@pytest.mark.timeout(120)
def test_rank_zeros_parameters_are_broadcast_at_setup(ranks: list[dict[str, Any]]) -> None:
    assert ranks[0]["weights_before_setup"] != ranks[1]["weights_before_setup"]
    assert ranks[1]["weights_after_setup"] == ranks[0]["weights_before_setup"]
    assert ranks[0]["weights_after_setup"] == ranks[0]["weights_before_setup"]


@pytest.mark.timeout(120)
def test_module_is_wrapped_on_cpu_without_device_ids_and_with_the_options(ranks: list[dict[str, Any]]) -> None:
    assert [r["ddp"] for r in ranks] == [["DistributedDataParallel", None, True]] * 2


@pytest.mark.timeout(120)
def test_gradients_are_identical_across_ranks_after_backward(ranks: list[dict[str, Any]]) -> None:
    assert [r["grads_equal"] for r in ranks] == [[True, True, True]] * 2


@pytest.mark.timeout(120)
def test_parameters_match_a_single_process_run_on_the_full_batch(spawn_run: dict[str, Any]) -> None:
    ranks, reference = spawn_run["ranks"], spawn_run["parent"]["reference"]
    assert ranks[0]["final_weights"] == ranks[1]["final_weights"]
    for got, want in zip(ranks[0]["final_weights"], reference):
        assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.timeout(120)
def test_sampler_shards_are_disjoint_and_cover_the_dataset(ranks: list[dict[str, Any]]) -> None:
    shard0, shard1 = (set(r["indices"][0]) for r in ranks)
    assert not shard0 & shard1
    assert shard0 | shard1 == set(range(8))
    assert all(batch == ranks[0]["indices"][0] for batch in ranks[0]["indices"])


@pytest.mark.timeout(120)
def test_no_backward_sync_skips_the_averaging_until_the_next_backward(ranks: list[dict[str, Any]]) -> None:
    assert [r["grads_equal_without_sync"] for r in ranks] == [False, False]
    assert [r["grads_equal_after_sync"] for r in ranks] == [True, True]


@pytest.mark.timeout(120)
def test_collectives_through_fabric(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        assert rank["all_reduce"] == {"n": 6, "t": [3.0]}
        assert rank["all_gather"] == {"w": [[0.0, 0.0], [1.0, 1.0]], "n": [0, 1]}
        assert rank["broadcast"] == {"config": {"lr": 0.1, "tags": ["a", "b"]}}


@pytest.mark.timeout(120)
def test_uneven_all_gather_raises_the_same_error_on_every_rank(ranks: list[dict[str, Any]]) -> None:
    assert ranks[0]["uneven"] == ranks[1]["uneven"]
    assert "rank 0: float32[3], rank 1: float32[4]" in ranks[0]["uneven"]


@pytest.mark.timeout(120)
def test_rank_zero_first_lets_rank_zero_finish_first(ranks: list[dict[str, Any]]) -> None:
    assert ranks[1]["entered"] >= ranks[0]["left"]
    assert [r["saw_prepared"] for r in ranks] == [True, True]


@pytest.mark.timeout(120)
def test_save_writes_once_and_load_restores_every_rank(spawn_run: dict[str, Any]) -> None:
    outdir, ranks = spawn_run["dir"], spawn_run["ranks"]
    assert sorted(p.name for p in outdir.glob("saved_by_rank*")) == ["saved_by_rank0"]
    assert [r["checkpoint_keys"] for r in ranks] == [["bias", "weight"]] * 2  # no "module." prefix
    assert [r["restored"] for r in ranks] == [True, True]
    assert [r["restored_step"] for r in ranks] == [3, 3]
    assert [r["remainder"] for r in ranks] == [[], []]


@pytest.mark.timeout(120)
def test_launch_returns_rank_zeros_result_on_the_cpu(spawn_run: dict[str, Any]) -> None:
    assert spawn_run["parent"]["rank"] == 0
    assert spawn_run["parent"]["final_is_cpu_tensor"] is True


# -- ddp: the script runs again --------------------------------------------------------------------------
def assert_clean_ddp_run(outdir: Path) -> None:
    result, _ = run_job("ddp_job.py", "ddp", "train", outdir=outdir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [read(outdir, f"rank{r}") for r in (0, 1)] == [
        {"rank": r, "world_size": 2, "equal": True, "backend": "gloo"} for r in (0, 1)
    ]


@pytest.mark.timeout(120)
def test_ddp_runs_the_script_again_as_rank_one(tmp_path: Path) -> None:
    assert_clean_ddp_run(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.soak
def test_finished_ddp_jobs_always_exit_zero(tmp_path: Path) -> None:
    # Without the teardown at exit, about one run in ten dies in gloo's destructors (SIGABRT).
    for attempt in range(5):
        outdir = tmp_path / str(attempt)
        outdir.mkdir()
        assert_clean_ddp_run(outdir)


# -- failures --------------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_failing_spawned_rank_ends_the_job_with_its_traceback(tmp_path: Path) -> None:
    result, elapsed = run_job("ddp_job.py", "ddp_spawn", "fail", outdir=tmp_path)
    assert result.returncode != 0
    assert "RuntimeError: rank 1 failed on purpose" in result.stderr
    assert "ProcessRaisedException" in result.stderr
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
    assert not [p for p in pids if Path(f"/proc/{p}").exists()], "a rank outlived the job"
    assert elapsed < 60
