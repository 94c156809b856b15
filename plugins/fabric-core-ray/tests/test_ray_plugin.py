"""The plugin without a Ray cluster: registration, detection, and the options refused before Ray starts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from fabric_core.plugin_api import EnvironmentSetupError, InvalidConfigError
from fabric_core.testing import check_plugin, fake_distribution, make_manager
from fabric_core_ray import _plugin

ROOT = Path(__file__).resolve().parents[1]


def test_registration_names_the_environment_and_the_runner() -> None:
    catalog = make_manager(("ray", _plugin)).catalog
    environment, runner = catalog.get("environment", "ray"), catalog.get("runner", "ray")
    assert environment.target == "fabric_core_ray.environment:RayEnvironment"
    assert environment.priority > max(e.priority for e in catalog.entries("environment") if e.plugin == "builtin")
    assert runner.target == "fabric_core_ray.launch:runner"
    assert callable(runner.load()) and callable(runner.load().add_arguments)


def test_plugin_meets_the_contract(tmp_path: Path) -> None:
    group = "fabric_core_ray_test.plugins"
    with fake_distribution(
        "fabric-core-ray", entry_points={"ray": "fabric_core_ray._plugin"}, group=group, root=tmp_path
    ):
        assert check_plugin("ray", group=group) == []


@pytest.mark.timeout(60)
def test_registering_and_probing_import_neither_ray_nor_torch() -> None:
    code = (
        "import sys, fabric_core_ray._plugin\n"
        "from fabric_core_ray.environment import RayEnvironment\n"
        "assert RayEnvironment.detect() is False\n"
        "heavy = sorted(m for m in ('torch', 'ray') if m in sys.modules)\n"
        "print(heavy); sys.exit(1 if heavy else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_auto_detection_outside_ray_keeps_the_default_environment() -> None:
    from fabric_core._kernel.selection import select

    manager = make_manager(("ray", _plugin))
    assert select(manager, accelerator="cpu").context.environment == "lightning"
    # Named outside a worker, it says it cannot read its ranks instead of guessing them.
    with pytest.raises(EnvironmentSetupError, match="not a Ray Train worker"):
        select(manager, accelerator="cpu", plugins=["ray"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_workers": 0}, r"`num_workers=0`: expected an integer >= 1"),
        ({"max_failures": -2}, r"`max_failures=-2`: expected an integer >= -1"),
        ({"resources_per_worker": {"CPU": "two"}}, r"resources_per_worker=.*'two'"),
    ],
)
def test_bad_run_options_are_refused_before_ray_starts(options: dict[str, object], message: str) -> None:
    from fabric_core_ray import run

    with pytest.raises(InvalidConfigError, match=message):
        run(__file__, **options)  # type: ignore[arg-type]


def test_a_missing_script_is_refused(tmp_path: Path) -> None:
    from fabric_core_ray import run

    with pytest.raises(InvalidConfigError, match="no such file"):
        run(tmp_path / "nope.py", num_workers=2)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``fabric-core run ...`` in a process that discovers the plugin through real dist-info metadata."""
    installed = any(ep.name == "ray" for ep in metadata.entry_points(group="fabric_core.plugins"))
    with contextlib.ExitStack() as stack:
        path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
        if not installed:  # a fresh worktree: the entry point from fake dist-info metadata
            entry_points = {"ray": "fabric_core_ray._plugin"}
            stack.enter_context(fake_distribution("fabric-core-ray", entry_points=entry_points, root=tmp_path / "d"))
            path.insert(0, str(tmp_path / "d"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        env.pop("RAY_ADDRESS", None)
        return subprocess.run(
            [sys.executable, "-m", "fabric_core", "run", *args], capture_output=True, text=True, timeout=60, env=env
        )


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-workers", "2"], "`fabric-core run --num-workers ...` is an option of `--launcher ray`"),
        (["--launcher", "ray", "--devices", "2"], "Ray places the processes; give their number with --num-workers"),
        (["--launcher", "ray", "--resources-per-worker", "{CPU: 2}"], "`--resources-per-worker {CPU: 2}` is not JSON"),
        (["--launcher", "ray", "--num-workers", "0"], "`num_workers=0`: expected an integer >= 1"),
        (["--launcher", "rey"], "rey"),
    ],
)
def test_cli_refuses_bad_options_before_starting_anything(tmp_path: Path, args: list[str], message: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('the script must not run')\n")
    result = _cli(tmp_path, *args, str(script))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert not (tmp_path / "ray_results").exists()


@pytest.mark.timeout(60)
def test_cli_help_lists_the_ray_options(tmp_path: Path) -> None:
    result = _cli(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--launcher", "--num-workers", "--address", "--resources-per-worker", "--max-failures"):
        assert option in result.stdout
