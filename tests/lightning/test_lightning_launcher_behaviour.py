"""The launchers and cluster environments compared with Lightning Fabric: the same call on both, the same result.

Each test runs one call against ``lightning_fabric`` and ``fabric_core`` (the ``library`` fixture). Lightning's
tests patch module globals at its paths (``strategies.launchers.multiprocessing.mp``, the observer class of
``strategies.launchers.subprocess_script``); where a test patches, it patches the same name in each package.
Real processes are started where the behaviour is about processes. Skipped without ``lightning_fabric``.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import torch

pytest.importorskip("lightning_fabric")

from fabric_core.testing import run_in_own_session
from tests.lightning_side_by_side import close_lightning_group

PACKAGES = ("lightning_fabric", "fabric_core")


@pytest.fixture(params=PACKAGES, ids=["lightning", "fabric-core"])
def library(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


def _module(library: ModuleType, path: str) -> ModuleType:
    return importlib.import_module(f"{library.__name__}.{path}")


def _sleeper(seconds: float = 30) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


# -- the multiprocessing launcher ----------------------------------------------------------------------------
def _spawn_strategy(library: ModuleType) -> Any:
    return library.Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn").strategy


def test_a_start_method_the_platform_lacks_is_a_value_error_naming_it(library: ModuleType) -> None:
    launchers = _module(library, "strategies.launchers.multiprocessing")
    with mock.patch.object(launchers.mp, "get_all_start_methods", return_value=["spawn"]):
        with pytest.raises(ValueError, match="The start method 'fork' is not available on this platform") as error:
            launchers._MultiProcessingLauncher(strategy=_spawn_strategy(library), start_method="fork")
    assert "Available methods are: spawn" in str(error.value)


def test_spawning_while_the_main_module_is_imported_asks_for_the_main_guard(library: ModuleType) -> None:
    launchers = _module(library, "strategies.launchers.multiprocessing")
    launcher = launchers._MultiProcessingLauncher(strategy=_spawn_strategy(library), start_method="spawn")
    with mock.patch.object(launchers.mp, "current_process", return_value=mock.Mock(_inheriting=True)):
        with pytest.raises(RuntimeError, match="requires that your script guards the main"):
            launcher.launch(print)


def test_the_workers_are_started_through_the_modules_mp_with_the_global_state(library: ModuleType) -> None:
    # Lightning's tests replace `mp` and read the call: the worker function, then (function, args, kwargs, a
    # channel for the result, the captured global state) for 'spawn'.
    launchers = _module(library, "strategies.launchers.multiprocessing")
    with mock.patch.object(launchers, "mp") as mp:
        mp.get_all_start_methods.return_value = ["spawn"]
        launcher = launchers._MultiProcessingLauncher(strategy=_spawn_strategy(library), start_method="spawn")
        assert launcher._start_method == "spawn" and launcher._strategy is not None
        with mock.patch.object(launchers, "_check_missing_main_guard"):
            launcher.launch(print, 1, x=2)
    mp.get_context.assert_called_with("spawn")
    (function,), call = mp.start_processes.call_args
    assert callable(function) and sorted(call) == ["args", "nprocs", "start_method"]
    assert (call["nprocs"], call["start_method"]) == (2, "spawn")
    assert tuple(call["args"][:3]) == (print, (1,), {"x": 2}) and len(call["args"]) == 5
    assert isinstance(call["args"][4], launchers._GlobalStateSnapshot)


def _report(fabric: Any, tensor: torch.Tensor, model: torch.nn.Module) -> dict[str, Any]:
    strategy = fabric.strategy
    strategy._set_world_ranks()  # Lightning's name, which launched code calls
    shared = [model.weight.is_shared(), model.bias.is_shared()]
    total = fabric.all_reduce(torch.tensor(float(fabric.global_rank + 1)), reduce_op="sum")
    result = {
        "start_method": strategy.launcher._start_method,
        "tensor_shared": tensor.is_shared(),
        "parameters_shared": shared,
        "sum": total.item(),
        "rank": fabric.global_rank,
    }
    close_lightning_group(fabric)
    return result


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parity
def test_spawned_workers_share_tensor_arguments_but_not_module_weights(library: ModuleType) -> None:
    fabric = library.Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    result = fabric.launch(_report, torch.zeros(2), torch.nn.Linear(2, 2))
    assert result == {
        "start_method": "spawn",
        "tensor_shared": True,
        "parameters_shared": [False, False],
        "sum": 3.0,
        "rank": 0,
    }


# -- the script launcher ---------------------------------------------------------------------------------
def _environment_at_local_rank(library: ModuleType, rank: int) -> Any:
    environments = _module(library, "plugins.environments")

    class AtLocalRank(environments.LightningEnvironment):  # type: ignore[misc,name-defined]
        """A user's environment that says fabric-core starts the processes, from a process that is not rank 0."""

        @property
        def creates_processes_externally(self) -> bool:
            return False

        def local_rank(self) -> int:
            return rank

    return AtLocalRank()


def test_the_script_launcher_refuses_to_start_children_from_a_local_rank_above_zero(library: ModuleType) -> None:
    launchers = _module(library, "strategies.launchers.subprocess_script")
    launcher = launchers._SubprocessScriptLauncher(_environment_at_local_rank(library, 1), num_processes=2, num_nodes=1)
    with pytest.raises(RuntimeError, match=r"attempted to launch new distributed processes with `local_rank > 0`"):
        launcher.launch(print)


def test_the_script_launcher_refuses_to_start_children_twice(library: ModuleType) -> None:
    launchers = _module(library, "strategies.launchers.subprocess_script")
    launcher = launchers._SubprocessScriptLauncher(_environment_at_local_rank(library, 0), num_processes=2, num_nodes=1)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    launcher.procs = [child]  # what the first launch left
    with pytest.raises(RuntimeError, match="The launcher can only create subprocesses once"):
        launcher.launch(print)


def test_the_child_observer_looks_once_at_real_children(library: ModuleType) -> None:
    observer_class = _module(library, "strategies.launchers.subprocess_script")._ChildProcessObserver
    done = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(2)]
    for child in done:
        child.wait(timeout=60)
    assert observer_class(main_pid=os.getpid(), child_processes=done)._run() is True
    running = _sleeper()
    try:
        assert observer_class(main_pid=os.getpid(), child_processes=[done[0], running])._run() is False
    finally:
        running.kill()
        running.wait()


def test_the_child_observer_kills_every_process_when_a_child_fails(library: ModuleType) -> None:
    observer_class = _module(library, "strategies.launchers.subprocess_script")._ChildProcessObserver
    failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    failed.wait(timeout=60)
    other, main = _sleeper(), _sleeper()  # `main` stands for the main process, which Lightning's way kills
    try:
        assert observer_class(main_pid=main.pid, child_processes=[failed, other])._run() is True
        assert other.wait(timeout=30) == -signal.SIGKILL
        assert main.wait(timeout=30) == -signal.SIGKILL
    finally:
        for process in (other, main):
            process.kill()
            process.wait()


def test_the_child_observer_thread_ends_once_the_children_are_done(library: ModuleType) -> None:
    observer_class = _module(library, "strategies.launchers.subprocess_script")._ChildProcessObserver
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    observer = observer_class(main_pid=os.getpid(), child_processes=[child], sleep_period=0.05)
    observer.start()
    observer.join(timeout=60)
    assert not observer.is_alive() and observer._finished


# -- the cluster environments ----------------------------------------------------------------------------
def _plain_environ(**extra: str) -> dict[str, str]:
    drop = ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "PL_", "FABRIC_CORE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PYTHONWARNINGS="ignore", **extra)
    return env


_MPI_SCRIPT = """
import importlib, json, os, sys
library = importlib.import_module(sys.argv[1])
env = importlib.import_module(sys.argv[1] + ".plugins.environments").MPIEnvironment()
lazy = [env._node_rank, env._main_address, env._main_port]  # nothing is exchanged until something is asked
report = {"lazy": lazy, "world": env.world_size(), "rank": env.global_rank(), "node": env.node_rank(),
          "local": env.local_rank(), "address": env.main_address, "port": type(env.main_port).__name__,
          "external": env.creates_processes_externally}
with open(os.path.join(sys.argv[2], f"{sys.argv[1]}-{report['rank']}.json"), "w") as f:
    json.dump(report, f)
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parity
def test_mpi_ranks_learn_their_node_and_local_rank_on_first_use(tmp_path: Path) -> None:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py and mpiexec are not installed (pip install mpi4py mpich)")
    script = tmp_path / "mpi_report.py"
    script.write_text(_MPI_SCRIPT)
    for package in PACKAGES:
        done = run_in_own_session(
            [mpiexec, "-n", "2", sys.executable, str(script), package, str(tmp_path)], timeout=120, env=_plain_environ()
        )
        assert done.returncode == 0, done.stdout[-3000:]
    reports = {p: [json.loads((tmp_path / f"{p}-{r}.json").read_text()) for r in (0, 1)] for p in PACKAGES}
    assert reports["lightning_fabric"] == reports["fabric_core"]
    assert [(r["local"], r["node"], r["world"], r["lazy"]) for r in reports["fabric_core"]] == [
        (0, 0, 2, [None, None, None]),
        (1, 0, 2, [None, None, None]),
    ]


_SETTER_LOG_SCRIPT = """
import json, logging, os
from lightning.fabric.plugins.environments import KubeflowEnvironment, SLURMEnvironment, TorchElasticEnvironment
records = []

class Grab(logging.Handler):
    def emit(self, record):
        records.append([record.name, record.getMessage()])

logger = logging.getLogger("lightning.fabric.plugins.environments")  # where Lightning's tests capture them
logger.setLevel(logging.DEBUG)
logger.addHandler(Grab())
os.environ.update(SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2", SLURM_PROCID="1", SLURM_LOCALID="1",
                  SLURM_NODEID="0", RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", GROUP_RANK="0",
                  MASTER_ADDR="1.2.3.4", MASTER_PORT="500")
for env in (SLURMEnvironment(), TorchElasticEnvironment(), KubeflowEnvironment()):
    env.set_global_rank(100)
    env.set_world_size(100)
print(json.dumps(sorted(message for _, message in records)))
"""


@pytest.mark.timeout(120)
@pytest.mark.slow
@pytest.mark.parity
def test_ignored_rank_setters_log_where_lightnings_environments_log(tmp_path: Path) -> None:
    script = tmp_path / "setters.py"
    script.write_text(_SETTER_LOG_SCRIPT)
    lines = []
    for prefix in ([], ["-m", "fabric_core.lightning_imports"]):
        done = subprocess.run(
            [sys.executable, *prefix, str(script)], capture_output=True, text=True, timeout=100, env=_plain_environ()
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines.append(json.loads(done.stdout.splitlines()[-1]))
    assert lines[0] == lines[1] and len(lines[0]) == 6
    assert sum("setting global rank is not allowed" in message for message in lines[1]) == 3


def test_slurm_detection_warns_where_srun_exists_but_did_not_start_the_process(
    library: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    environments = _module(library, "plugins.environments")
    warning = _module(library, "utilities.warnings").PossibleUserWarning
    with pytest.warns(warning, match="`srun` command is available"):
        assert not environments.SLURMEnvironment.detect()
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    with _no_warnings():
        assert environments.SLURMEnvironment.detect()


class _no_warnings:
    """No warning of any kind inside the block."""

    def __enter__(self) -> None:
        import warnings

        self._catcher = warnings.catch_warnings()
        self._catcher.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc: object) -> None:
        self._catcher.__exit__(*exc)


def test_the_script_launchers_patch_points_are_its_module_globals(library: ModuleType) -> None:
    # Lightning's tests patch `subprocess.Popen`, `time.sleep` and `os.kill` through the launcher's module.
    launchers = _module(library, "strategies.launchers.subprocess_script")
    assert (launchers.time, launchers.os, launchers.subprocess) == (time, os, subprocess)
