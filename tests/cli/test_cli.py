"""The command line: list-plugins (without torch), explain, and the no-torch import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fabric_core.cli import main


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return result.stdout


def test_import_fabric_core_does_not_import_torch() -> None:
    out = run_python("import sys, fabric_core; fabric_core.spec('x'); print('torch' in sys.modules)")
    assert out.strip() == "False"


def test_list_plugins_json_does_not_import_torch() -> None:
    code = (
        "import sys, io, contextlib, json\n"
        "from fabric_core.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = main(['list-plugins', '--json', '--all'])\n"
        "data = json.loads(buf.getvalue())\n"
        "print(rc, 'torch' in sys.modules, len(data['components']))\n"
    )
    rc, has_torch, count = run_python(code).split()
    assert (rc, has_torch) == ("0", "False")
    assert int(count) >= 15


def test_python_dash_m_entry_point_works() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fabric_core", "list-plugins", "--all", "--kind", "strategy"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "single_device" in result.stdout
    assert "One process on one device" in result.stdout


def test_list_plugins_table_filters_kind_and_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-plugins", "--all", "--kind", "precision"]) == 0
    out = capsys.readouterr().out
    for name in ("32-true", "64-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"):
        assert name in out
    assert "single_device" not in out
    assert main(["list-plugins"]) == 0
    assert "single_device" not in capsys.readouterr().out  # built-ins only with --all


def test_list_plugins_check_reports_availability(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-plugins", "--all", "--check", "--json", "--kind", "environment"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["components"]}
    assert rows["lightning"]["available"] is True
    assert rows["kubeflow"]["available"] is False
    assert rows["slurm"]["missing_requirements"] == []


def test_explain_shows_each_decision(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.warns(UserWarning, match="bf16-mixed"):
        assert main(["explain", "--precision", "16-mixed"]) == 0
    out = capsys.readouterr().out
    assert "fabric_core.precision.mixed:MixedPrecision" in out
    assert "'16-mixed' resolved to 'bf16-mixed'" in out
    assert "builtin.fabric_core_select_precision" in out
    assert "single_device" in out and "lightning" in out


def test_explain_shows_components_named_in_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--accelerator", "cpu", "--plugins", "bf16-mixed", "--plugins", "kubeflow"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "(in plugins=)" in rows["precision"] and "builtin.fabric_core_select_precision" in rows["precision"]
    assert "fabric_core.precision.mixed:MixedPrecision" in rows["precision"]
    assert "passed in plugins=" in rows["environment"] and "KubeflowEnvironment" in rows["environment"]


def test_explain_reports_bad_names_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--strategy", "singel_device"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'single_device'" in err
    assert "Traceback" not in err
