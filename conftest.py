"""Shared fixtures for the core and plugin tests: each test starts from a clean process state."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

#: Shared fixtures of helper modules: the object-storage tests' local S3 server and buckets (``s3_bucket``).
pytest_plugins = ["tests.object_storage"]

#: Marks of tests that start processes or need a cluster, a GPU or another venv: each implies ``slow``, so that
#: ``python -m pytest -m "not slow"`` (the inner loop, CONTRIBUTING.md) leaves every one of them out.
SLOW_MARKS = frozenset(
    {
        "multiprocess",
        "kill_resume",
        "soak",
        "deepspeed",
        "zero_edit",
        "examples",
        "parity",
        "object_storage",
        "ray",
        "world_sizes",
        "multinode",
        "slurm",
        "one_install",
        "litgpt",
        "xla",
        "cuda",
    }
)


def pytest_itemcollected(item: pytest.Item) -> None:
    if any(item.get_closest_marker(name) for name in SLOW_MARKS):
        item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _clean_fabric_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Drop FABRIC_CORE_* and rank variables a developer's shell may carry; restore global torch and process state."""
    for name in list(os.environ):
        if name.startswith("FABRIC_CORE_") or name in (
            "LOCAL_RANK",
            "RANK",
            "WORLD_SIZE",
            "NODE_RANK",
            "SLURM_NTASKS",
            "TORCHELASTIC_RUN_ID",
            "LSB_JOBID",
        ):
            monkeypatch.delenv(name, raising=False)
    # seed_everything records its seed as Lightning does, in PL_GLOBAL_SEED / PL_SEED_WORKERS: not a test's to keep.
    # A test that joins a one-process group in this process (strategy="ddp", devices=1) sets MASTER_ADDR/PORT and
    # keeps a store listening on that port; every later job started from here would inherit the port and fail
    # to bind it. The group is destroyed and the variables put back after each test.
    kept = ("PL_GLOBAL_SEED", "PL_SEED_WORKERS", "MASTER_ADDR", "MASTER_PORT")
    seeds = {name: os.environ.get(name) for name in kept}
    import torch
    import torch.distributed as dist

    grouped = dist.is_available() and dist.is_initialized()
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_dtype(dtype)
    if not grouped and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    for name, value in seeds.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    from fabric_core.utilities.rank_zero import rank_zero_only

    rank_zero_only.reset()
