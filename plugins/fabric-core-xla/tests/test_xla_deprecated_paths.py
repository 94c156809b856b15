"""Lightning's deprecated TPU module paths (``fabric_core.accelerators.tpu``...) without the XLA plugin.

With the plugin, tests/compat (case ``tpu-deprecated-paths``) compares the paths, their classes and the
warnings with Lightning's; here the plugin is blocked or absent: each path still imports, as Lightning's do
without torch_xla, and its classes say how to get the plugin when used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fabric_core._lightning.paths.plugin_modules import resolve
from fabric_core.testing import make_manager
from fabric_core_xla._names import TPU_PATHS


def test_every_deprecated_path_imports_and_asks_for_the_plugin_when_used() -> None:
    catalog = make_manager().catalog  # no plugin installed, as on a bare `pip install fabric-core`
    for path in TPU_PATHS:
        spec = resolve(f"fabric_core.{path}", catalog)
        assert spec is not None and spec.loader is not None
        module = spec.loader.create_module(spec)
        with pytest.raises(
            ModuleNotFoundError,
            match=r"`TPUAccelerator` comes with the fabric-core plugin fabric-core-xla, "
            r"which is not installed\. Install it: `pip install fabric-core-xla`",
        ):
            module.TPUAccelerator()
        assert module.TPUAccelerator.is_available() is False


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_blocked_plugin_is_named_at_every_deprecated_path_and_class() -> None:
    code = textwrap.dedent(
        """
        import importlib, json, sys
        import fabric_core.accelerators, fabric_core.plugins, fabric_core.plugins.precision, fabric_core.strategies
        out = {}
        for path in sys.argv[1:]:
            try:
                importlib.import_module("fabric_core." + path).TPUAccelerator()
            except ModuleNotFoundError as exc:
                out[path] = str(exc)
        for package, name in [
            (fabric_core.plugins.precision, "TPUPrecision"),
            (fabric_core.plugins, "TPUBf16Precision"),
            (fabric_core.plugins.precision, "XLABf16Precision"),
        ]:
            try:
                getattr(package, name)()
            except ModuleNotFoundError as exc:
                out[name] = str(exc)
        print(json.dumps(out))
        """
    )
    env = {**os.environ, "FABRIC_CORE_BLOCK_PLUGINS": "xla"}
    done = subprocess.run(
        [sys.executable, "-c", code, *TPU_PATHS], capture_output=True, text=True, timeout=100, env=env
    )
    assert done.returncode == 0, done.stderr
    messages = json.loads(done.stdout)
    assert sorted(messages) == sorted([*TPU_PATHS, "TPUPrecision", "TPUBf16Precision", "XLABf16Precision"])
    for key, message in messages.items():
        assert "fabric-core-xla" in message and "blocked by FABRIC_CORE_BLOCK_PLUGINS" in message, (key, message)
        assert "pip install" not in message
