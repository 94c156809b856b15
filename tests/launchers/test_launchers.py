"""The launchers: the command run again for each rank, start checks, and real multi-process runs."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.errors import InvalidConfigError
from fabric_core.launchers._threads import set_num_threads_if_needed, suggested_num_threads
from fabric_core.launchers.multiprocessing import MultiProcessingLauncher
from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher, script_command
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import connect_to_cpus

JOBS = Path(__file__).parents[1] / "_jobs"
EXE = sys.executable


def strategy() -> ParallelStrategy:
    return connect_to_cpus(ParallelStrategy())


# -- the command run again -------------------------------------------------------------------------------
def test_script_command_reruns_the_script_with_its_arguments() -> None:
    assert script_command(["python", "train.py", "--lr", "1"]) == [EXE, os.path.abspath("train.py"), "--lr", "1"]


def test_script_command_keeps_interpreter_options_and_module() -> None:
    argv = ["python", "-W", "error", "-X", "dev", "-u", "-m", "pkg.train", "--x"]
    assert script_command(argv) == [EXE, "-W", "error", "-X", "dev", "-u", "-m", "pkg.train", "--x"]


def test_script_command_keeps_code_passed_with_dash_c() -> None:
    assert script_command(["python", "-Werror", "-c", "print(1)", "a"]) == [EXE, "-Werror", "-c", "print(1)", "a"]


@pytest.mark.parametrize("argv", [["python"], ["python", "-"], ["python", "-i"]])
def test_script_command_refuses_code_that_cannot_run_again(argv: list[str]) -> None:
    with pytest.raises(InvalidConfigError, match="ddp_spawn"):
        script_command(argv)


def test_no_children_when_the_environment_created_the_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    launcher = SubprocessScriptLauncher(LightningEnvironment(), num_processes=2, num_nodes=1)
    assert launcher.launch(lambda x: x * 2, 21) == 42
    assert launcher.procs == []
    assert not launcher.is_interactive_compatible
    assert not launcher.requires_function


# -- threads ---------------------------------------------------------------------------------------------
def test_omp_threads_are_left_alone_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    set_num_threads_if_needed(2)
    assert os.environ["OMP_NUM_THREADS"] == "3"


def test_omp_threads_are_split_between_local_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        set_num_threads_if_needed(2)
        assert os.environ["OMP_NUM_THREADS"] == str(suggested_num_threads(2))
    finally:
        torch.set_num_threads(before)
    assert suggested_num_threads(10_000) == 1


# -- multiprocessing start checks ------------------------------------------------------------------------
def test_unknown_start_method_lists_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match=r"'popen'.*'spawn', 'fork', 'forkserver'"):
        MultiProcessingLauncher(strategy(), start_method="popen")


def test_only_fork_is_interactive_compatible() -> None:
    assert MultiProcessingLauncher(strategy(), start_method="fork").is_interactive_compatible
    spawn = MultiProcessingLauncher(strategy(), start_method="spawn")
    assert not spawn.is_interactive_compatible
    assert spawn.requires_function


def test_spawn_while_importing_main_asks_for_the_main_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a spawned worker sees when the script starts processes at import time.
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(RuntimeError, match='if __name__ == "__main__":'):
        MultiProcessingLauncher(strategy(), start_method="spawn").launch(print)


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_fork_is_refused_once_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch, start_method: str) -> None:
    # Lightning's message (its test_check_for_bad_cuda_fork), also where torch has `_is_in_bad_fork`.
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # this machine has no GPU
    with pytest.raises(
        RuntimeError, match=r"Lightning can't create new processes if CUDA is already initialized.*ddp_spawn"
    ):
        MultiProcessingLauncher(strategy(), start_method=start_method).launch(print)


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_a_process_forked_after_cuda_was_initialised_cannot_fork_workers(
    monkeypatch: pytest.MonkeyPatch, start_method: str
) -> None:
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True, raising=False)
    with pytest.raises(RuntimeError, match="Cannot re-initialize CUDA in forked subprocess"):
        MultiProcessingLauncher(strategy(), start_method=start_method).launch(print)


# -- real processes: the script (or module) runs again as rank 1 -----------------------------------------
def run_job(args: list[str], outdir: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MASTER_PORT", "LOCAL_RANK")}
    environ.update(env)
    start = time.monotonic()
    result = subprocess.run(
        [EXE, *args, str(outdir)], capture_output=True, text=True, timeout=60, env=environ, cwd=outdir
    )
    return result, time.monotonic() - start


def assert_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if Path(f"/proc/{p}").exists()], "a rank outlived the job"


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_module_run_again_with_the_rank_environment(tmp_path: Path) -> None:
    result, _ = run_job(["-m", "popen_job", "ok"], tmp_path, PYTHONPATH=str(JOBS))
    assert result.returncode == 0, result.stderr
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["sum"] for r in reports] == [[3.0], [3.0]]
    assert [r["main_spec"] for r in reports] == ["popen_job", "popen_job"]  # rank 1 ran `-m popen_job` too
    env0, env1 = (r["env"] for r in reports)
    assert (env0["LOCAL_RANK"], env1["LOCAL_RANK"]) == ("0", "1")
    for key in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "WORLD_SIZE", "OMP_NUM_THREADS"):
        assert env0[key] == env1[key] is not None
    assert env0["WORLD_SIZE"] == "2"


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
@pytest.mark.parametrize("failing", [0, 1])
def test_a_failing_rank_ends_the_whole_job(tmp_path: Path, failing: int) -> None:
    result, elapsed = run_job([str(JOBS / "popen_job.py"), f"fail{failing}"], tmp_path)
    assert result.returncode != 0
    assert elapsed < 30
    assert f"RuntimeError: rank {failing} failed on purpose" in result.stderr
    assert_gone([int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)])


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_the_first_failing_worker_is_reported_not_a_consequence(tmp_path: Path) -> None:
    # Rank 1 raises first but is still exiting when rank 0 fails because of it: torch would report rank 0.
    result = subprocess.run(
        [EXE, str(JOBS / "root_cause_job.py"), str(tmp_path / "flag")],
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["reported", "1", "cause"], result.stdout + result.stderr
