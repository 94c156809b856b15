"""DeepSpeed reads and writes its checkpoint folders with local file operations: a URL is refused, never mangled.

``Path("s3://bucket/ckpt")`` is the local folder ``s3:``; a folder URL is refused on save and on load, naming it,
before anything is written, and a consolidated file at a URL loads as any file does. ``memory://`` stands in for
a bucket (the same fsspec calls; the S3 server's tests are ``tests/io/test_object_storage.py``).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from fabric_core._fabric.assembly import build
from fabric_core._kernel.selection import select
from fabric_core.errors import InvalidConfigError
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.testing import make_manager
from fabric_core_deepspeed import _plugin


def test_a_checkpoint_folder_at_a_url_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    manager = make_manager(("deepspeed", _plugin))
    strategy = build(select(manager, accelerator="cpu", devices=2, strategy="deepspeed")).strategy
    folder = f"memory://{uuid.uuid4().hex}/ckpt"
    with pytest.raises(InvalidConfigError, match=rf"cannot save the checkpoint folder '{folder}'"):
        strategy.save_checkpoint(folder, {})
    TorchCheckpointIO().save_checkpoint({"step": 3}, f"{folder}/latest")  # a folder at the URL
    with pytest.raises(InvalidConfigError, match=rf"cannot load the checkpoint folder '{folder}'"):
        strategy.load_checkpoint(folder, {"step": 0})
    # A consolidated file loads from its URL.
    assert strategy.load_checkpoint(f"{folder}/latest", {}) == {"step": 3}
    assert list(tmp_path.iterdir()) == []  # nothing named "memory:" here
