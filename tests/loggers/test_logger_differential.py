"""The CSV and TensorBoard loggers against Lightning Fabric 2.6's: the same cases, each package in its own process.

``_jobs/logger_differential_job.py`` runs every case against one package; the two result files must agree
(values equal; where Lightning raises, ours raises something its builtin exception type catches, with its key
phrase), as in the compat suite (``tests/compat/compat_cases.py``, whose ``Case`` and ``difference`` these
are). The cases cover what ``lightning.pytorch``'s logger subclasses and user code read: the private state,
``CSVLogger.experiment`` as Lightning's ``_ExperimentWriter``, when the version folder is created and warned
about, and the files written.
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning_fabric")
pytest.importorskip("tensorboard")

from fabric_core.testing import run_in_own_session

HERE = Path(__file__).resolve().parents[1]  # tests/
JOB = HERE / "_jobs" / "logger_differential_job.py"
sys.path.insert(0, str(HERE / "compat"))

import compat_cases  # noqa: E402


def _load_job() -> Any:
    spec = importlib.util.spec_from_file_location("logger_differential_job", JOB)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The first test to run starts both jobs (the module's fixture): about a minute on two cores.
pytestmark = pytest.mark.timeout(330)

CASES = {case.id: case for case in _load_job().CASES}


def _run(package: str, out: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "PL_"))}
    env.pop("PYTHONPATH", None)  # no zero-edit handover: lightning_fabric is Lightning's own
    env["PYTHONWARNINGS"] = "ignore"
    done = run_in_own_session([sys.executable, str(JOB), package, str(out)], timeout=150, env=env)
    assert done.returncode == 0, f"{package} job failed ({done.returncode}):\n{done.stdout[-3000:]}"
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("logger-differential")
    with ThreadPoolExecutor(2) as pool:
        futures = {package: pool.submit(_run, package, root / package) for package in compat_cases.PACKAGES}
        return {package: future.result() for package, future in futures.items()}


def _outcome(found: dict[str, Any], catch: str | None = None) -> compat_cases.Outcome:
    """An ``Outcome`` from a job's record; an error stands as its builtin class (``catch`` where it has that one)."""
    if "error" not in found:
        return compat_cases.Outcome(value=found["value"])
    name = catch if catch in found["error"] else found["error"][0]
    return compat_cases.Outcome(error=getattr(builtins, str(name)), message=found["message"])


@pytest.mark.parametrize("case_id", list(CASES))
@pytest.mark.slow
def test_same_behaviour_as_lightning(case_id: str, results: dict[str, dict[str, Any]]) -> None:
    theirs_found, ours_found = (results[package][case_id] for package in compat_cases.PACKAGES)
    theirs = _outcome(theirs_found)
    catch = None if theirs.error is None else compat_cases.builtin_base(theirs.error).__name__
    ours = _outcome(ours_found, catch)
    why = compat_cases.difference(CASES[case_id], theirs, ours)
    assert why is None, f"{case_id}: {why}"


def test_the_writer_is_lightnings_and_warns_at_creation(results: dict[str, dict[str, Any]]) -> None:
    """The two behaviours this suite was written for, spelled out on our side (the cases compare them)."""
    ours = results["fabric_core"]
    writer = ours["csv-experiment-is-the-writer"]["value"]
    assert writer["class"] == "_ExperimentWriter" and writer["is_the_writer_class"] and not writer["is_the_logger"]
    existing = ours["csv-existing-version-warns-when-the-experiment-is-created"]["value"]
    assert existing["at_creation"] == [[True, True]] and existing["at_first_write"] == 0
    assert existing["files_after_creation"] == ["exp/", "exp/version_0/", "exp/version_0/notes.txt"]
