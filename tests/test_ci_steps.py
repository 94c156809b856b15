"""Every mark the default run leaves out runs in a step of ``.ci/run``, and CONTRIBUTING.md names each step.

``pyproject.toml``'s ``addopts`` deselects the long multi-process guarantees (``-m "not kill_resume and ..."``)
so that the README's test command stays short; a mark deselected there and run nowhere else would silently
drop its tests from CI.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
#: Marks run by a script of their own (which .ci/run calls) rather than by a `pytest -m` line of .ci/run.
BY_SCRIPT = {"slurm": "scripts/slurm_check.sh", "one_install": "scripts/one_install_check.sh"}


def _deselected() -> set[str]:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    expression = re.search(r'-m "([^"]+)"', options["addopts"])
    assert expression, options["addopts"]
    return set(re.findall(r"not (\w+)", expression.group(1)))


def test_every_deselected_mark_runs_in_a_ci_step_named_in_contributing() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    # `-m kill_resume` or `-m "kill_resume or object_storage"`: every mark a step's expression names.
    expressions = re.findall(r'^python -m pytest .*?-m (?:"([^"]+)"|(\w+))', ci, re.M)
    steps = {mark for quoted, plain in expressions for mark in re.findall(r"\w+", quoted or plain)} - {"or"}
    scripts = {mark for mark, script in BY_SCRIPT.items() if script in ci}
    deselected = _deselected()
    assert {"kill_resume", "soak", "deepspeed", "zero_edit"} <= deselected  # the parser reads the real option
    assert deselected - steps - scripts == set(), "deselected by default and run by no step of .ci/run"
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    unnamed = [mark for mark in deselected if f"`{mark}`" not in contributing]
    assert not unnamed, f"marks of CI steps that CONTRIBUTING.md does not name: {unnamed}"
