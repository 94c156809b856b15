"""`torchrun train.py` just works: `devices="auto"` takes the processes a cluster environment started as one job.

With `Fabric()` left at `devices="auto"` and `strategy="auto"`, the job's processes per node (and nodes) come
from the detected environment's `topology()`, and the "auto" strategy hook picks a multi-process strategy for
them. Explicit values always win.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from pathlib import Path

import pytest

from fabric_core._kernel.selection import select
from fabric_core.environments.kubeflow import KubeflowEnvironment
from fabric_core.errors import InvalidConfigError
from fabric_core.testing import make_manager

JOBS = Path(__file__).parents[1] / "_jobs"
_SKIP = ("FABRIC_CORE_", "TORCHELASTIC", "LOCAL_", "GROUP_", "ROLE_", "MASTER_", "RANK", "WORLD_SIZE", "NODE_RANK")
_SKIP += ("SLURM_", "LSB_", "JSM_", "OMPI_", "PMI_", "MV2_")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith(_SKIP):
            monkeypatch.delenv(name)
    return monkeypatch


def manager() -> object:
    import fabric_core_ddp._plugin as ddp

    return make_manager(ddp)


def torchrun_env(monkeypatch: pytest.MonkeyPatch, per_node: int, nodes: int, rank: int = 0) -> None:
    for name, value in {
        "TORCHELASTIC_RUN_ID": "test",
        "WORLD_SIZE": per_node * nodes,
        "LOCAL_WORLD_SIZE": per_node,
        "GROUP_WORLD_SIZE": nodes,
        "RANK": rank,
        "LOCAL_RANK": rank % per_node,
        "GROUP_RANK": rank // per_node,
    }.items():
        monkeypatch.setenv(name, str(value))


def test_torchrun_workers_become_devices_nodes_and_ddp(clean_env: pytest.MonkeyPatch) -> None:
    torchrun_env(clean_env, per_node=2, nodes=3)
    selection = select(manager(), accelerator="cpu")  # type: ignore[arg-type]
    ctx = selection.context
    assert (ctx.num_processes, ctx.num_nodes, ctx.world_size) == (2, 3, 6)
    assert (ctx.environment, ctx.strategy, ctx.devices_from_environment) == ("torchelastic", "ddp", True)
    steps = {d.step: d for d in selection.decisions}  # what `fabric-core explain` shows
    assert "2 per node x 3 node(s), as torchelastic started them" in steps["devices"].reason
    assert steps["num_nodes"].value == "3"
    assert steps["strategy"].hook == "ddp.fabric_core_select_strategy"  # the plugin's "auto" hook chose it


def test_the_inference_is_logged(clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Selection (the kernel) records the sentence; building the components tells it, on rank 0."""
    from fabric_core._fabric.assembly import build

    torchrun_env(clean_env, per_node=2, nodes=1)
    selection = select(manager(), accelerator="cpu")  # type: ignore[arg-type]
    [notice] = selection.notices
    assert "torchelastic started 2 processes (2 per node x 1 node(s))" in notice and "Pass `devices=1`" in notice
    with caplog.at_level(logging.INFO, logger="fabric_core"):
        build(selection)
    assert notice in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "world"),
    [
        ({"devices": 1}, (1, 1)),  # one independent copy per process, as the user asked
        ({"strategy": "single_device"}, (1, 1)),
        ({"num_nodes": 2}, (2, 2)),  # devices inferred, the explicit num_nodes kept
    ],
)
def test_explicit_values_win(clean_env: pytest.MonkeyPatch, kwargs: dict[str, object], world: tuple[int, int]) -> None:
    torchrun_env(clean_env, per_node=2, nodes=3)
    ctx = select(manager(), accelerator="cpu", **kwargs).context  # type: ignore[arg-type]
    assert (ctx.num_processes, ctx.num_nodes) == world
    assert ctx.devices_from_environment is ("devices" not in kwargs and "strategy" not in kwargs)


def test_without_the_ddp_plugin_the_error_names_the_process_count(clean_env: pytest.MonkeyPatch) -> None:
    torchrun_env(clean_env, per_node=2, nodes=1)
    with pytest.raises(InvalidConfigError, match=r"No installed plugin provides a strategy for 2 processes"):
        select(make_manager(), accelerator="cpu")


def test_more_processes_than_devices_is_a_clear_error(clean_env: pytest.MonkeyPatch) -> None:
    torchrun_env(clean_env, per_node=100_000, nodes=1)
    with pytest.raises(InvalidConfigError, match=r"torchelastic started 100000 processes per node.*devices=1") as info:
        select(manager(), accelerator="cpu")  # type: ignore[arg-type]
    assert info.value.argument == "devices"


def test_a_plain_run_is_unchanged(clean_env: pytest.MonkeyPatch) -> None:
    ctx = select(manager(), accelerator="cpu").context  # type: ignore[arg-type]
    assert (ctx.environment, ctx.world_size, ctx.strategy, ctx.devices_from_environment) == (
        "lightning",
        1,
        "single_device",
        False,
    )


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "2"}, (2, 2)),
        ({"SLURM_NTASKS": "6", "SLURM_NTASKS_PER_NODE": "2(x3)", "SLURM_NNODES": "3"}, (2, 3)),
        ({"SLURM_NTASKS": "3", "SLURM_NTASKS_PER_NODE": "2(x1),1", "SLURM_NNODES": "2"}, None),  # uneven
    ],
)
def test_slurm_topology(clean_env: pytest.MonkeyPatch, variables: dict[str, str], expected: object) -> None:
    from fabric_core.environments.slurm import SLURMEnvironment

    for name, value in {"SLURM_JOB_NAME": "train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", **variables}.items():
        clean_env.setenv(name, value)
    assert SLURMEnvironment().topology() == expected
    if expected is not None:
        ctx = select(manager(), accelerator="cpu").context  # type: ignore[arg-type]
        assert (ctx.environment, (ctx.num_processes, ctx.num_nodes), ctx.strategy) == ("slurm", expected, "ddp")


@pytest.mark.parametrize("variables", [{"SLURM_NTASKS": "2", "SLURM_NNODES": "2"}, {"SLURM_NTASKS": "4"}])
def test_slurm_ntasks_alone_is_refused_before_anything_is_inferred(
    clean_env: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    """``--ntasks`` without ``--ntasks-per-node`` lets SLURM place tasks unevenly; refused as Lightning does."""
    from fabric_core.environments.slurm import SLURMEnvironment
    from fabric_core.errors import EnvironmentSetupError

    for name, value in {"SLURM_JOB_NAME": "train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", **variables}.items():
        clean_env.setenv(name, value)
    with pytest.raises(EnvironmentSetupError, match="--ntasks-per-node"):
        SLURMEnvironment()


def test_lsf_topology_comes_from_the_rank_file(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fabric_core.environments.lsf import LSFEnvironment

    rankfile = tmp_path / "ranks"
    rankfile.write_text("launch\nnodeA\nnodeA\nnodeB\nnodeB\n")
    clean_env.setenv("LSB_DJOB_RANKFILE", str(rankfile))
    clean_env.setenv("LSB_JOBID", "1234")
    assert LSFEnvironment().topology() == (2, 2)
    rankfile.write_text("launch\nnodeA\nnodeA\nnodeB\n")
    assert LSFEnvironment().topology() is None


def test_torchrun_with_uneven_nodes_infers_nothing(clean_env: pytest.MonkeyPatch) -> None:
    from fabric_core.environments.torchelastic import TorchElasticEnvironment

    torchrun_env(clean_env, per_node=2, nodes=2)
    clean_env.setenv("WORLD_SIZE", "3")  # elastic nodes with different worker counts
    assert TorchElasticEnvironment().topology() is None
    clean_env.delenv("LOCAL_WORLD_SIZE")
    assert TorchElasticEnvironment().topology() is None


def test_an_environment_passed_explicitly_is_used(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("WORLD_SIZE", "3")
    clean_env.setenv("RANK", "1")
    ctx = select(manager(), accelerator="cpu", plugins=[KubeflowEnvironment()]).context  # type: ignore[arg-type]
    assert (ctx.num_processes, ctx.num_nodes, ctx.strategy) == (1, 3, "ddp")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_plain_torchrun_trains_one_job(tmp_path: Path) -> None:
    from fabric_core.testing import run_in_own_session

    env = {k: v for k, v in os.environ.items() if not k.startswith(_SKIP)}
    env["OMP_NUM_THREADS"] = "1"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(JOBS / "torchrun_job.py"),
        str(tmp_path),
    ]
    done = run_in_own_session(command, timeout=120, env=env)
    assert done.returncode == 0, done.stdout[-4000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["local_rank"], r["world_size"]) for r in reports] == [(0, 0, 2), (1, 1, 2)]
    assert [r["sum"] for r in reports] == [3.0, 3.0]  # 1 + 2: the all_reduce crossed both processes
    assert {(r["strategy"], r["environment"]) for r in reports} == {("DDPStrategy", "TorchElasticEnvironment")}
    assert all(r["synchronised"] for r in reports)  # one model, trained by both
    assert done.stdout.count("torchelastic started 2 processes") <= 1  # told once, by rank 0


# Each rank writes a file of its own: mpiexec forwards the ranks' stdout through one pipe, where two lines
# printed at once can arrive joined ('[...][...]\n\n'), which a test reading stdout would fail on now and then.
_MPI_SELECT = """
import json, pathlib, sys
from mpi4py import MPI
import fabric_core_ddp._plugin as ddp
from fabric_core._kernel.selection import select
from fabric_core.testing import make_manager
ctx = select(make_manager(ddp), accelerator="cpu").context
out = pathlib.Path(sys.argv[1], f"rank{MPI.COMM_WORLD.Get_rank()}.json")
out.write_text(json.dumps([ctx.environment, ctx.num_processes, ctx.num_nodes, ctx.strategy]))
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_mpi_ranks_on_one_host_become_the_devices(tmp_path: Path) -> None:
    import importlib.util
    import shutil

    from fabric_core.testing import run_in_own_session

    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py and mpiexec are not installed (pip install mpi4py mpich)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SKIP)}
    command = [mpiexec, "-n", "2", sys.executable, "-c", _MPI_SELECT, str(tmp_path)]
    done = run_in_own_session(command, timeout=100, env=env)
    assert done.returncode == 0, done.stdout[-4000:]
    seen = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert seen == [["mpi", 2, 1, "ddp"]] * 2
