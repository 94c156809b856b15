"""A local Ray cluster for the tests marked ``ray``, shared by the module that asks for it."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:  # importable without installing (pip install -e makes this a no-op)
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="module")
def ray_cluster(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[str]:
    """Start a 2-CPU Ray cluster on 127.0.0.1 for this module; yield its address; shut it down after."""
    ray = pytest.importorskip("ray")
    monkeypatch_module.delenv("RAY_ADDRESS", raising=False)
    # Ray's sockets live under the temporary folder, whose path must stay short (AF_UNIX limit).
    temp = tempfile.mkdtemp(prefix="fcray-", dir="/tmp")
    stack = contextlib.ExitStack()
    if not any(ep.name == "ray" for ep in metadata.entry_points(group="fabric_core.plugins")):
        # Not pip-installed yet (a fresh worktree): real dist-info metadata for the entry point, on the
        # PYTHONPATH the cluster's workers inherit, so that Fabric() in a worker discovers the plugin.
        from fabric_core.testing import fake_distribution

        folder = stack.enter_context(
            fake_distribution(
                "fabric-core-ray", entry_points={"ray": "fabric_core_ray._plugin"}, root=Path(temp) / "dist"
            )
        )
        path = os.pathsep.join([str(folder), ROOT, os.environ.get("PYTHONPATH", "")])
        monkeypatch_module.setenv("PYTHONPATH", path)
    info = ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp,
        log_to_driver=True,
    )
    try:
        yield str(info.address_info["gcs_address"])
    finally:
        ray.shutdown()
        stack.close()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch
