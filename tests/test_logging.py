"""Structured kernel events: silent by default, console or JSON lines on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = "from fabric_core import Fabric; Fabric(accelerator='cpu', precision='bf16-mixed')"


def run(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_")}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env={**base, **env}, capture_output=True, text=True, timeout=60, check=True
    )


@pytest.mark.slow
def test_no_structured_events_by_default() -> None:
    # Only the line Lightning Fabric logs too; no kernel event. PATH holds only the interpreter's folder: on a
    # machine with SLURM installed, the SLURM environment's "`srun` is available" warning would be one more line.
    assert run(PATH=os.path.dirname(sys.executable)).stderr == "Using bfloat16 Automatic Mixed Precision (AMP)\n"


_INFO_SCRIPT = """
import logging, sys
if sys.argv[1] == "lightning":
    from lightning_fabric import Fabric, seed_everything
    package = "lightning_fabric"
else:
    from fabric_core import Fabric, seed_everything
    package = "fabric_core"
if sys.argv[2] == "quiet":
    logging.getLogger(package).setLevel(logging.WARNING)
seed_everything(42)
Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
seed_everything(7, verbose=False)
"""


def _without_srun(path: str) -> str:
    """``path`` without the folders that hold SLURM's ``srun``: Lightning warns on every ``Fabric()`` where it
    exists (a machine with SLURM's client installed), which is not what this comparison is about."""
    return os.pathsep.join(d for d in path.split(os.pathsep) if not os.path.exists(os.path.join(d, "srun")))


def _info_lines(library: str, mode: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "PL_"))}
    base["PATH"] = _without_srun(base.get("PATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", _INFO_SCRIPT, library, mode], env=base, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stderr.splitlines() if "Warning" not in line and line.strip()]


@pytest.mark.slow
@pytest.mark.parity
def test_info_lines_are_lightnings_and_can_be_silenced() -> None:
    pytest.importorskip("lightning_fabric")
    ours = _info_lines("fabric_core", "default")
    assert ours == ["Seed set to 42", "Using bfloat16 Automatic Mixed Precision (AMP)"]
    assert ours == _info_lines("lightning", "default")
    assert _info_lines("fabric_core", "quiet") == []


@pytest.mark.slow
def test_json_lines_record_discovery_and_each_decision() -> None:
    done = run(FABRIC_CORE_LOG="debug", FABRIC_CORE_LOG_FORMAT="json")
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert "plugin_loaded" in names and "catalog_built" in names and "selection" in names
    selection = next(e for e in events if e["event"] == "selection")
    assert (selection["accelerator"], selection["strategy"], selection["precision"]) == (
        "cpu",
        "single_device",
        "bf16-mixed",
    )
    assert {e["level"] for e in events} <= {"debug", "info", "warning"}
    assert all("timestamp" in e for e in events)


@pytest.mark.slow
def test_info_level_hides_debug_events_and_console_format_is_readable() -> None:
    done = run(FABRIC_CORE_LOG="info")
    assert "selection" in done.stderr and "precision=bf16-mixed" in done.stderr
    assert "plugin_loaded" not in done.stderr  # a debug event
