"""Two FSDP processes load sharded folders with real payloads, or a missing or cut shard.

The job is ``_jobs/fsdp_payload_job.py``.

Every payload runs ``touch PWNED.<pid>`` if it is ever unpickled without restrictions; no rank may run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabric_core.testing.payloads import executions

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(200)]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory, run_job: Any, reports: Any) -> tuple[Path, list[dict[str, Any]]]:
    outdir: Path = tmp_path_factory.mktemp("fsdp-payloads")
    run_job("fsdp_payload_job.py", outdir)
    return outdir, reports(outdir)


@pytest.mark.parametrize(
    ("case", "file", "what"),
    [
        ("metadata", ".metadata", "posix.system"),
        ("shard", ".distcp", "posix.system"),
        ("meta_pt", "meta.pt", "system"),
    ],
)
def test_no_rank_runs_a_payload_and_each_names_the_file(
    job: tuple[Path, list[dict[str, Any]]], case: str, file: str, what: str
) -> None:
    outdir, ranks = job
    assert executions(outdir / "PWNED") == 0
    for report in ranks:
        error = report[case]
        assert error is not None, f"rank loaded the {case} payload folder"
        assert error["type"] == "UnsafeCheckpointError" and error["reason"] == "unsafe"
        assert error["path"].startswith(str(outdir / case)) and error["path"].endswith(file)
        assert what in error["message"] and "weights_only=False" in error["message"]


@pytest.mark.parametrize(
    ("case", "file", "detail"),
    [("missing", "__1_0.distcp", "does not exist"), ("truncated", "__0_0.distcp", "bytes, but the metadata")],
)
def test_a_missing_or_cut_shard_is_a_checkpoint_error_on_every_rank(
    job: tuple[Path, list[dict[str, Any]]], case: str, file: str, detail: str
) -> None:
    outdir, ranks = job
    for report in ranks:
        error = report[case]
        assert error is not None and error["type"] == "CheckpointError" and error["reason"] == "corrupt"
        assert error["path"] == str(outdir / case / file)
        assert detail in error["message"]


def test_legitimate_and_trusted_folders_still_load(job: tuple[Path, list[dict[str, Any]]]) -> None:
    outdir, ranks = job
    for report in ranks:
        assert report["clean_step"] == 1 and report["clean_equal"] is True
        assert report["trusted_step"] == 1
    # weights_only=False is the trusted path: the payload planted there ran, once per rank.
    assert executions(outdir / "TRUSTED") == 2
