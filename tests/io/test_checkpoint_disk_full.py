"""A save on a full disk: a clear ENOSPC error, the previous checkpoint intact, no temp file left.

The disk is real: a 1 MiB tmpfs mounted in a mount namespace of its own (``unshare``), which needs no
privileges where user namespaces are allowed.
"""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_SIZE = "1m"
_SAVE = r"""
import json, os, sys
import torch
from fabric_core.errors import CheckpointError
from fabric_core.io.torch_io import TorchCheckpointIO

folder = sys.argv[1]
path = os.path.join(folder, "last.ckpt")
io = TorchCheckpointIO()
io.save_checkpoint({"w": torch.full((1000,), 7.0), "step": 1}, path)
report = {}
try:
    io.save_checkpoint({"w": torch.zeros(2**19), "b": torch.zeros(2**18), "step": 2}, path)  # 3 MiB
except BaseException as err:
    report = {
        "types": [c.__name__ for c in type(err).__mro__],
        "errno": getattr(err, "errno", None),
        "message": str(err),
        "path": getattr(err, "path", None),
    }
previous = io.load_checkpoint(path)
report["previous_intact"] = bool((previous["w"] == 7.0).all()) and previous["step"] == 1
report["files"] = sorted(os.listdir(folder))
print(json.dumps(report))
"""


def _small_filesystem_command(folder: Path) -> list[str] | None:
    """A command prefix that runs what follows with a 1 MiB tmpfs mounted on ``folder``, or ``None``."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for flags in ("-rm", "-m"):  # a user namespace where unprivileged; a mount namespace alone as root
        command = [unshare, flags, "sh", "-c", f'mount -t tmpfs -o size={_SIZE} tmpfs "$0" && exec "$@"', str(folder)]
        probe = subprocess.run([*command, "true"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return command
    return None


@pytest.mark.slow
def test_a_save_that_runs_out_of_space_says_so_and_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "small"
    folder.mkdir()
    prefix = _small_filesystem_command(folder)
    if prefix is None:
        pytest.skip("cannot mount a small tmpfs here (no `unshare`, or user and mount namespaces are not allowed)")
    command = [*prefix, sys.executable, "-c", _SAVE, str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    path = str(folder / "last.ckpt")
    assert "CheckpointError" in report["types"] and "OSError" in report["types"], report
    assert report["errno"] == errno.ENOSPC
    message = report["message"]
    assert message.startswith(f"No space left on device while writing {path!r} (about 3,1"), message
    assert "bytes needed" in message and "free)" in message and "enforce fail" not in message, message
    assert report["path"] == path
    assert report["previous_intact"] is True
    assert report["files"] == ["last.ckpt"]  # no temp file left behind
