"""The example third-party plugin, installed by pip into a throwaway virtual environment, works by name."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fabric-core-jsonl"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_example_plugin_installs_and_is_selected_by_name(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The throwaway environment sees this one's packages (torch, fabric-core) but installs into its own.
    Path(site, "_parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(EXAMPLE)],
        check=True,
        capture_output=True,
        text=True,
        timeout=150,
    )
    listing = subprocess.run(
        [python, "-m", "fabric_core", "list-plugins", "--json"], capture_output=True, text=True, check=True
    )
    data = json.loads(listing.stdout)
    record = next(r for r in data["plugins"] if r["name"] == "jsonl")
    assert (record["status"], record["distribution"]) == ("loaded", "fabric-core-jsonl")
    assert any(c["name"] == "jsonl" and c["kind"] == "logger" for c in data["components"])

    out = tmp_path / "metrics.jsonl"
    script = (
        "from fabric_core import Fabric, spec\n"
        f"fabric = Fabric(accelerator='cpu', loggers=spec('jsonl', path={str(out)!r}))\n"
        "fabric.log('loss', 0.25, step=3)\n"
        "fabric.log_dict({'acc': 0.5}, step=4)\n"
        "print(type(fabric.logger).__module__)\n"
    )
    run = subprocess.run([python, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    assert run.stdout.strip() == "fabric_core_jsonl.logger"
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [{"step": 3, "loss": 0.25}, {"step": 4, "acc": 0.5}]
    # The plugin was installed into the throwaway environment only.
    assert "fabric_core_jsonl" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        __import__("fabric_core_jsonl")
