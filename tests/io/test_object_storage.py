"""Checkpoints in object storage, against a real S3 server on 127.0.0.1 (moto's) through s3fs.

One file with ``fabric.save``/``load``, run checkpoints (resume, pruning, the commit marker, listings that never
show an incomplete checkpoint), background saves and ``fabric-core consolidate`` reading a sharded folder
from the bucket. Every URL keeps its ``s3://`` form: nothing named ``s3:`` appears on the local disk. The
sharded strategies' tests (two processes) are in ``plugins/fabric-core-fsdp/tests/test_fsdp_object_storage.py``,
a save killed mid-upload at the end of this file.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core import Fabric
from fabric_core.errors import InvalidConfigError
from fabric_core.io.async_io import AsyncCheckpointIO
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.run_checkpoints import MARKER, STATE, RunCheckpoints
from tests.object_storage import keys, s3, uploads_in_progress, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test in an empty folder, where a URL turned into a local path would leave ``s3:``."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _fabric(**kwargs: Any) -> Fabric:
    fabric = Fabric(accelerator="cpu", devices=1, **kwargs)
    fabric.launch()
    return fabric


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 3)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_one_file_is_saved_and_loaded_at_its_s3_url(s3_bucket: str, in_tmp: Path) -> None:
    fabric = _fabric()
    model = fabric.setup_module(_model(0))
    url = f"{s3_bucket}/runs/exp/last.ckpt"
    fabric.save(url, {"model": model, "step": 7})
    assert keys(s3_bucket) == ["runs/exp/last.ckpt"]

    other = fabric.setup_module(_model(1))
    state: dict[str, Any] = {"model": other, "step": 0}
    assert fabric.load(url, state) == {}
    assert state["step"] == 7 and _same(model, other)
    assert set(fabric.load(url)) == {"model", "step"}  # the whole checkpoint
    with pytest.raises(FileNotFoundError, match=r"missing\.ckpt"):
        fabric.load(f"{s3_bucket}/runs/exp/missing.ckpt", state)
    assert list(in_tmp.iterdir()) == []  # no local folder "s3:"


def _data_parallel(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    fully_shard(model, mesh=mesh["data_parallel"])
    return model


_SHARDED = [".metadata", "__0_0.distcp", "meta.pt"]


@pytest.mark.parametrize(
    ("strategy", "written"),
    [("ddp", [""]), ("fsdp", _SHARDED), ("fsdp1", _SHARDED), ("model_parallel", _SHARDED)],
)
def test_each_strategy_keeps_the_s3_url(strategy: str, written: list[str], s3_bucket: str, in_tmp: Path) -> None:
    """One process of each distributed strategy (the single-device one is above; two processes of the sharded ones
    in plugins/fabric-core-fsdp/tests/test_fsdp_object_storage.py): every key lands under the URL's own key."""
    from fabric_core import spec

    chosen: Any = spec(strategy, parallelize_fn=_data_parallel) if strategy == "model_parallel" else strategy
    fabric = _fabric(strategy=chosen)
    model = fabric.setup_module(_model(0))
    url = f"{s3_bucket}/ckpts/step-3"
    fabric.save(url, {"model": model, "step": 3})
    assert keys(s3_bucket) == [f"ckpts/step-3/{name}".rstrip("/") for name in written]
    fresh = fabric.setup_module(_model(1))
    state: dict[str, Any] = {"model": fresh, "step": 0}
    fabric.load(url, state)
    assert state["step"] == 3 and _same(model, fresh)
    assert list(in_tmp.iterdir()) == []


@pytest.mark.parametrize("strategy", ["auto", "fsdp"])
def test_save_raw_writes_safetensors_into_the_bucket_and_load_raw_reads_them(
    strategy: str, s3_bucket: str, in_tmp: Path
) -> None:
    """A folder of shards (index last) and one file at their URLs; with fsdp each DTensor is gathered whole."""
    from safetensors.torch import load as load_bytes

    fabric = _fabric(strategy=strategy)
    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 3))
    reference = {k: v.clone() for k, v in source.state_dict().items()}
    model = fabric.setup_module(source)
    fabric.save_raw(f"{s3_bucket}/hf", model, max_shard_size=60)
    fabric.save_raw(f"{s3_bucket}/one.safetensors", model)
    stored = keys(s3_bucket)
    shards = [k for k in stored if k.startswith("hf/model-")]
    assert len(shards) == 4 and "hf/model.safetensors.index.json" in stored and "one.safetensors" in stored
    whole = load_bytes(s3().cat(f"{s3_bucket}/one.safetensors".removeprefix("s3://")))
    assert all(torch.equal(whole[k], v) for k, v in reference.items())
    for url in (f"{s3_bucket}/hf", f"{s3_bucket}/one.safetensors"):
        torch.manual_seed(1)
        fresh = fabric.setup_module(torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 3)))
        assert fabric.load_raw(url, fresh) == ([], [])
        state = {k: getattr(v, "full_tensor", lambda v=v: v)() for k, v in fresh.state_dict().items()}
        assert all(torch.equal(state[k], v) for k, v in reference.items())
    # Saved again in one file: the shards and the index go, so the folder is model.safetensors alone.
    fabric.save_raw(f"{s3_bucket}/hf", model)
    assert [k for k in keys(s3_bucket) if k.startswith("hf/")] == ["hf/model.safetensors"]
    assert list(in_tmp.iterdir()) == []


def test_run_checkpoints_in_a_bucket_resume_prune_and_write_the_marker_last(
    s3_bucket: str, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fabric_core.io.committed as committed

    fabric = _fabric()
    model = fabric.setup_module(_model(0))
    directory = f"{s3_bucket}/run"
    ckpt = RunCheckpoints(fabric, directory, keep_last=2, signals=())
    assert ckpt.directory == directory and ckpt.latest() is None

    seen_at_commit: list[list[str]] = []
    real_write = committed.write_remote

    def write(url: str, data: bytes) -> None:  # records what the folder holds when its marker is uploaded
        if url.endswith("/" + MARKER):
            seen_at_commit.append(keys(url.rsplit("/", 1)[0]))
        real_write(url, data)

    monkeypatch.setattr(committed, "write_remote", write)
    for step in range(1, 5):
        with torch.no_grad():
            next(model.parameters()).add_(1.0)
        assert ckpt.save(step, {"model": model, "step": step}) == f"{directory}/step-{step:08d}"
    assert seen_at_commit == [[STATE]] * 4  # the state was whole in the bucket before each marker

    # Pruned to the newest two; each holds the state and its marker, whose digest is of the stored bytes.
    assert keys(directory) == [f"step-0000000{n}/{name}" for n in (3, 4) for name in (MARKER, STATE)]
    marker = json.loads(s3().cat(f"{directory}/step-00000004/{MARKER}".removeprefix("s3://")))
    stored = s3().cat(f"{directory}/step-00000004/{STATE}".removeprefix("s3://"))
    assert marker["step"] == 4 and marker["files"] == {STATE: hashlib.sha256(stored).hexdigest()}
    assert ckpt.latest() == f"{directory}/step-00000004"

    for verify in (False, True):
        fresh = fabric.setup_module(_model(1))
        state: dict[str, Any] = {"model": fresh, "step": 0}
        assert RunCheckpoints(fabric, directory, verify=verify, signals=()).resume(state) == 4
        assert state["step"] == 4 and _same(model, fresh)
    assert list(in_tmp.iterdir()) == []


def test_a_listing_never_shows_a_checkpoint_without_its_marker(s3_bucket: str, in_tmp: Path) -> None:
    fabric = _fabric()
    model = fabric.setup_module(_model(0))
    directory = f"{s3_bucket}/run"
    ckpt = RunCheckpoints(fabric, directory, keep_last=None, signals=())
    ckpt.save(1, {"model": model})
    # What a save killed before its commit leaves: the state, whole or not, and no marker.
    fs = s3()
    fs.pipe_file(f"{directory}/step-00000002/{STATE}".removeprefix("s3://"), b"half a checkpoint")
    assert ckpt.latest() == f"{directory}/step-00000001"
    assert RunCheckpoints(fabric, directory, signals=()).resume({"model": model}) == 1
    # A damaged checkpoint fails its digests: set aside (its marker renamed, its files kept), the previous one
    # is chosen; the next save deletes the folders without a marker.
    ckpt.save(3, {"model": model})
    fs.pipe_file(f"{directory}/step-00000003/{STATE}".removeprefix("s3://"), b"damaged")
    with pytest.warns(UserWarning, match="step-00000003.*damaged"):
        assert RunCheckpoints(fabric, directory, verify=True, signals=()).resume({"model": model}) == 1
    assert ckpt.latest() == f"{directory}/step-00000001"
    ckpt.save(4, {"model": model})
    assert sorted({name.split("/")[0] for name in keys(directory)}) == ["step-00000001", "step-00000004"]
    # Saving a step again replaces it: the old marker goes first.
    ckpt.save(4, {"model": model, "again": True})
    assert "again" in fabric.load(f"{directory}/step-00000004/{STATE}")
    assert list(in_tmp.iterdir()) == []


def test_background_saves_to_a_bucket(s3_bucket: str, in_tmp: Path) -> None:
    fabric = _fabric(plugins=[AsyncCheckpointIO()])
    model = fabric.setup_module(_model(0))
    fabric.save(f"{s3_bucket}/last.ckpt", {"model": model, "step": 1})
    ckpt = RunCheckpoints(fabric, f"{s3_bucket}/run", signals=())
    folder = ckpt.save(2, {"model": model})
    ckpt.wait()
    assert keys(s3_bucket) == ["last.ckpt", f"run/step-00000002/{MARKER}", f"run/step-00000002/{STATE}"]
    fresh = fabric.setup_module(_model(1))
    assert fabric.load(f"{s3_bucket}/last.ckpt", {"model": fresh}) == {"step": 1} and _same(model, fresh)
    assert ckpt.latest() == folder and ckpt.resume({"model": _model(2)}) == 2
    assert list(in_tmp.iterdir()) == []


def _sharded_folder(url: str) -> dict[str, torch.Tensor]:
    """A sharded checkpoint as ``fabric.save`` writes it (DCP files, ``meta.pt``), written to ``url``."""
    import torch.distributed.checkpoint as dcp

    weights = _model(3).state_dict()
    TorchCheckpointIO().save_checkpoint({"step": 5}, f"{url}/meta.pt")
    dcp.save({"model": dict(weights)}, checkpoint_id=url, no_dist=True)
    return weights


def test_consolidate_reads_a_sharded_checkpoint_from_the_bucket(s3_bucket: str, in_tmp: Path) -> None:
    from fabric_core.cli import main
    from fabric_core.io.distributed import consolidate

    folder = f"{s3_bucket}/sharded"
    weights = _sharded_folder(folder)
    assert ".metadata" in keys(folder)
    # Read in place by any strategy's checkpoint I/O, and consolidated to a local file or into the bucket.
    loaded = TorchCheckpointIO().load_checkpoint(folder)
    assert loaded["step"] == 5 and all(torch.equal(loaded["model"][k], v) for k, v in weights.items())
    assert main(["consolidate", folder, "--output", str(in_tmp / "whole.pt")]) == 0
    assert main(["consolidate", folder]) == 0
    for written in (str(in_tmp / "whole.pt"), f"{folder}.consolidated"):
        whole = TorchCheckpointIO().load_checkpoint(written)
        assert whole["step"] == 5 and all(torch.equal(whole["model"][k], v) for k, v in weights.items())
    with pytest.raises(InvalidConfigError, match="already exists"):  # never overwritten, in the bucket either
        consolidate(folder)
    assert sorted(os.listdir(in_tmp)) == ["whole.pt"]


def test_consolidate_writes_safetensors_from_and_into_the_bucket(s3_bucket: str, in_tmp: Path) -> None:
    from safetensors.torch import load, load_file

    from fabric_core.cli import main
    from fabric_core.io.distributed import consolidate

    folder = f"{s3_bucket}/sharded"
    weights = _sharded_folder(folder)
    assert main(["consolidate", folder, "--output", f"{s3_bucket}/model.safetensors"]) == 0
    assert main(["consolidate", folder, "--output", f"{s3_bucket}/hf/", "--max-shard-size", "40"]) == 0
    assert main(["consolidate", folder, "--output", "local.safetensors"]) == 0
    assert keys(f"{s3_bucket}/hf") == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    in_folder: dict[str, torch.Tensor] = {}
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        in_folder.update(load(s3().cat_file(f"{s3_bucket}/hf/{name}".removeprefix("s3://"))))
    single = load(s3().cat_file(f"{s3_bucket}/model.safetensors".removeprefix("s3://")))
    for written in (single, in_folder, load_file(in_tmp / "local.safetensors")):
        assert sorted(written) == sorted(weights) and all(torch.equal(written[k], v) for k, v in weights.items())
    with pytest.raises(InvalidConfigError, match="already holds weights"):  # never overwritten, in the bucket either
        consolidate(folder, f"{s3_bucket}/hf/")
    assert sorted(os.listdir(in_tmp)) == ["local.safetensors"]


_KILLED_WRITER = """
import sys, torch
from fabric_core import Fabric
from fabric_core.run_checkpoints import RunCheckpoints
fabric = Fabric(accelerator="cpu", devices=1)
ckpt = RunCheckpoints(fabric, sys.argv[1], keep_last=None, signals=())
ckpt.save(1, {"weights": torch.full((1000,), 1.0)})
print("saved 1", flush=True)
# About 160 MB: more than s3fs sends in one request, so the state goes up as a multipart upload.
ckpt.save(2, {"weights": torch.full((40_000_000,), 2.0)})
print("saved 2", flush=True)
"""


@pytest.mark.kill_resume
@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_a_save_killed_mid_upload_leaves_the_previous_checkpoint_the_one_that_resumes(
    s3_bucket: str, in_tmp: Path
) -> None:
    directory = f"{s3_bucket}/run"
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, directory], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "saved 1"
        wait_until(lambda: uploads_in_progress(s3_bucket), 90, "the multipart upload of step 2's state")
        writer.send_signal(signal.SIGKILL)  # mid-upload: the upload was started and not completed
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert uploads_in_progress(s3_bucket) == [f"run/step-00000002/{STATE}"]  # killed before its end

    fabric = _fabric()
    ckpt = RunCheckpoints(fabric, directory, signals=())
    assert ckpt.latest() == f"{directory}/step-00000001"
    state: dict[str, Any] = {"weights": None}
    assert ckpt.resume(state) == 1 and torch.equal(state["weights"], torch.full((1000,), 1.0))
    assert not any(name.startswith("step-00000002/" + MARKER) for name in keys(directory))
    assert list(in_tmp.iterdir()) == []
