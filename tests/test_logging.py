"""Structured kernel events: silent by default, console or JSON lines on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = "from fabric_core import Fabric; Fabric(accelerator='cpu', precision='bf16-mixed')"


def run(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_")}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env={**base, **env}, capture_output=True, text=True, timeout=60, check=True
    )


def test_silent_by_default() -> None:
    assert run().stderr == ""


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


def test_info_level_hides_debug_events_and_console_format_is_readable() -> None:
    done = run(FABRIC_CORE_LOG="info")
    assert "selection" in done.stderr and "precision=bf16-mixed" in done.stderr
    assert "plugin_loaded" not in done.stderr  # a debug event
