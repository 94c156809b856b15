"""``Fabric(loggers="tensorboard")`` works with no options, writing where ``"csv"`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabric_core import Fabric
from fabric_core.testing import make_manager
from fabric_core_tensorboard import _plugin


def test_the_name_alone_builds_a_logger_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fabric = Fabric(accelerator="cpu", loggers="tensorboard", plugin_manager=make_manager(("tensorboard", _plugin)))
    fabric.log("loss", 1.0, step=0)
    fabric.logger.finalize("success")
    assert fabric.logger.name == "lightning_logs"
    assert list((tmp_path / "lightning_logs" / "version_0").glob("events.out.tfevents.*"))
