"""The built-in cluster environments: lightning, torchelastic, slurm, lsf, mpi, kubeflow."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fabric_core._kernel.registry import import_target
from fabric_core.environments._env import find_free_network_port
from fabric_core.environments.kubeflow import KubeflowEnvironment
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.environments.lsf import LSFEnvironment
from fabric_core.environments.mpi import MPIEnvironment
from fabric_core.environments.slurm import SLURMEnvironment, expand_hostlist
from fabric_core.environments.torchelastic import TorchElasticEnvironment
from fabric_core.errors import FabricCoreWarning, InvalidConfigError, PossibleUserWarning

REPO = Path(__file__).resolve().parents[2]
_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "STANDALONE_PORT",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "WORLD_SIZE",
    "RANK",
    "TORCHELASTIC_RUN_ID",
)
_PREFIXES = ("SLURM_", "LSB_", "JSM_")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start every test from an environment with no scheduler variables, and restore it after."""
    for name in list(os.environ):
        if name.startswith(_PREFIXES):
            monkeypatch.delenv(name)
    for name in _NAMES:
        # setenv first so that monkeypatch also removes values the code under test sets (MASTER_PORT).
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def set_env(monkeypatch: pytest.MonkeyPatch, **values: object) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, str(value))


# -- probes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "fabric_core.environments.lightning:LightningEnvironment.detect",
        "fabric_core.environments.torchelastic:TorchElasticEnvironment.detect",
        "fabric_core.environments.slurm:SLURMEnvironment.detect",
        "fabric_core.environments.lsf:LSFEnvironment.detect",
        "fabric_core.environments.mpi:MPIEnvironment.detect",
        "fabric_core.environments.kubeflow:never_detected",
    ],
)
def test_detect_is_usable_as_a_registry_probe(target: str) -> None:
    assert import_target(target)() is target.endswith("LightningEnvironment.detect")


def test_only_lightning_is_detected_in_a_plain_process() -> None:
    detected = [
        env.__name__
        for env in (
            LightningEnvironment,
            TorchElasticEnvironment,
            SLURMEnvironment,
            LSFEnvironment,
            MPIEnvironment,
        )
        if env.detect()
    ]
    assert detected == ["LightningEnvironment"]


# -- free port ---------------------------------------------------------------------------------------------


def test_free_port_can_be_bound() -> None:
    port = find_free_network_port()
    assert 1024 <= port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_standalone_port_overrides_the_free_port_search(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, STANDALONE_PORT=23456)
    assert find_free_network_port() == 23456


# -- lightning ---------------------------------------------------------------------------------------------


def test_lightning_defaults() -> None:
    env = LightningEnvironment()
    assert LightningEnvironment.detect()
    assert not env.creates_processes_externally
    assert env.main_address == "127.0.0.1"
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (1, 0, 0, 0)


def test_lightning_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, MASTER_ADDR="10.0.0.7", MASTER_PORT=29501, LOCAL_RANK=3, NODE_RANK=2)
    env = LightningEnvironment()
    assert env.creates_processes_externally
    assert (env.main_address, env.main_port, env.local_rank(), env.node_rank()) == ("10.0.0.7", 29501, 3, 2)


def test_lightning_node_rank_falls_back_to_group_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, GROUP_RANK=4)
    assert LightningEnvironment().node_rank() == 4
    set_env(monkeypatch, NODE_RANK=1)
    assert LightningEnvironment().node_rank() == 1


def test_lightning_world_size_and_rank_are_set_by_the_strategy() -> None:
    env = LightningEnvironment()
    env.set_world_size(4)
    env.set_global_rank(3)
    assert (env.world_size(), env.global_rank()) == (4, 3)


def test_lightning_chooses_a_free_port_once_and_shares_it_through_the_environment() -> None:
    env = LightningEnvironment()
    port = env.main_port
    assert os.environ["MASTER_PORT"] == str(port)
    assert env.main_port == port
    assert LightningEnvironment().main_port == port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_lightning_teardown_removes_world_size_and_the_port_it_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, WORLD_SIZE=2)
    env = LightningEnvironment()
    _ = env.main_port
    env.teardown()
    assert "WORLD_SIZE" not in os.environ
    assert "MASTER_PORT" not in os.environ


def test_lightning_teardown_keeps_a_port_the_user_set(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, MASTER_PORT=29600)
    env = LightningEnvironment()
    assert env.main_port == 29600
    env.teardown()
    assert os.environ["MASTER_PORT"] == "29600"


def test_a_non_integer_variable_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, LOCAL_RANK="one")
    with pytest.raises(InvalidConfigError, match=r"LOCAL_RANK='one' is not an integer"):
        LightningEnvironment().local_rank()


# -- torchelastic ------------------------------------------------------------------------------------------


def test_torchelastic_is_detected_by_its_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not TorchElasticEnvironment.detect()
    set_env(monkeypatch, TORCHELASTIC_RUN_ID="none")
    assert TorchElasticEnvironment.detect()


def test_torchelastic_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(
        monkeypatch,
        MASTER_ADDR="node0",
        MASTER_PORT=29400,
        WORLD_SIZE=8,
        RANK=5,
        LOCAL_RANK=1,
        GROUP_RANK=2,
    )
    env = TorchElasticEnvironment()
    assert env.creates_processes_externally
    assert (env.main_address, env.main_port) == ("node0", 29400)
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (8, 5, 1, 2)
    env.set_world_size(3)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (8, 5)


def test_torchelastic_warns_about_a_missing_rendezvous() -> None:
    env = TorchElasticEnvironment()
    with pytest.warns(FabricCoreWarning, match="MASTER_ADDR is not set"):
        assert env.main_address == "127.0.0.1"
    with pytest.warns(FabricCoreWarning, match="MASTER_PORT is not set"):
        assert env.main_port == 12910


def test_torchelastic_names_a_missing_variable() -> None:
    with pytest.raises(InvalidConfigError, match="WORLD_SIZE is not set"):
        TorchElasticEnvironment().world_size()


def test_torchelastic_validates_the_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, WORLD_SIZE=4)
    env = TorchElasticEnvironment()
    env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(InvalidConfigError, match=r"devices=2, num_nodes=1.*torchrun started 4"):
        env.validate_settings(num_devices=2, num_nodes=1)


# -- slurm -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("", []),
        ("node1", ["node1"]),
        ("127.0.0.1", ["127.0.0.1"]),
        ("alpha,beta", ["alpha", "beta"]),
        ("alpha beta", ["alpha", "beta"]),
        ("host[5-7,12]", ["host5", "host6", "host7", "host12"]),
        ("host[3]", ["host3"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
        ("a[1-2],b,c[9]", ["a1", "a2", "b", "c9"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("my-host-01,my-host-02", ["my-host-01", "my-host-02"]),
    ],
)
def test_expand_hostlist(nodelist: str, hosts: list[str]) -> None:
    assert expand_hostlist(nodelist) == hosts


@pytest.mark.parametrize(
    ("nodelist", "reason"),
    [
        ("host[1-3", "not closed"),
        ("host]1[", "do not pair up"),
        ("host[[1]]", "do not pair up"),
        ("host[5-2]", "runs backwards"),
        ("host[a-c]", "not a number or a range"),
        ("host[1-]", "not a number or a range"),
    ],
)
def test_expand_hostlist_rejects_malformed_lists(nodelist: str, reason: str) -> None:
    with pytest.raises(InvalidConfigError, match=reason) as info:
        expand_hostlist(nodelist)
    assert repr(nodelist) in str(info.value)


@pytest.mark.parametrize(("job_name", "detected"), [("train", True), ("bash", False), ("interactive", False)])
def test_slurm_detection(monkeypatch: pytest.MonkeyPatch, job_name: str, detected: bool) -> None:
    assert not SLURMEnvironment.detect()
    set_env(monkeypatch, SLURM_NTASKS=4, SLURM_JOB_NAME=job_name)
    assert SLURMEnvironment.detect() is detected


def test_slurm_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(
        monkeypatch,
        SLURM_NTASKS=8,
        SLURM_NTASKS_PER_NODE=4,
        SLURM_PROCID=6,
        SLURM_LOCALID=2,
        SLURM_NODEID=1,
        SLURM_JOB_ID=1234567,
        SLURM_JOB_NAME="train",
        SLURM_NODELIST="gpu[03-04]",
    )
    env = SLURMEnvironment()
    assert env.creates_processes_externally
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (8, 6, 2, 1)
    assert env.main_address == "gpu03"
    assert env.main_port == 15000 + 4567
    assert env.job_id() == 1234567 and env.job_name() == "train"
    env.set_world_size(2)
    env.set_global_rank(0)
    assert (env.world_size(), env.global_rank()) == (8, 6)


def test_slurm_rendezvous_can_be_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM_NODELIST="gpu[03-04]", SLURM_JOB_ID=99, MASTER_ADDR="head", MASTER_PORT=31000)
    env = SLURMEnvironment()
    assert (env.main_address, env.main_port) == ("head", 31000)


def test_slurm_rendezvous_defaults_without_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    env = SLURMEnvironment()
    assert (env.main_address, env.main_port) == ("127.0.0.1", 12910)
    set_env(monkeypatch, SLURM_JOB_ID=12345, SLURM_JOB_NAME="bash")
    assert env.main_port == 12910


def test_slurm_requeue_options() -> None:
    assert SLURMEnvironment().requeue_signal == getattr(signal, "SIGUSR1", None)
    env = SLURMEnvironment(auto_requeue=False, requeue_signal=signal.SIGTERM)
    assert (env.auto_requeue, env.requeue_signal) == (False, signal.SIGTERM)


@pytest.mark.parametrize(("value", "expected"), [("USR2", "SIGUSR2"), ("sigurg", "SIGURG"), ("12", "SIGUSR2")])
def test_the_requeue_signal_can_be_any_signal_slurm_sends(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    # SLURM's `--signal=SIG@N` sends any signal: FABRIC_CORE_REQUEUE_SIGNAL names it, an argument still wins.
    monkeypatch.setenv("FABRIC_CORE_REQUEUE_SIGNAL", value)
    assert SLURMEnvironment().requeue_signal == getattr(signal, expected)
    assert SLURMEnvironment(requeue_signal=signal.SIGTERM).requeue_signal == signal.SIGTERM


@pytest.mark.parametrize("value", ["USR9", "SIGNOPE", "999"])
def test_a_requeue_signal_that_names_no_signal_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("FABRIC_CORE_REQUEUE_SIGNAL", value)
    with pytest.raises(InvalidConfigError, match=rf"FABRIC_CORE_REQUEUE_SIGNAL='{value}' names no signal.*USR1, USR2"):
        SLURMEnvironment()


def test_without_scontrol_the_requeue_says_why_and_the_job_exits_for_a_wrapper_to_requeue(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fabric_core._run import preemption

    monkeypatch.setenv("PATH", str(tmp_path))  # a container without SLURM's client tools
    assert preemption.requeue(4242) is False
    err = capsys.readouterr().err
    assert "cannot requeue job 4242: `scontrol` is not on the PATH" in err and "wrapper script" in err
    assert preemption.exit_code(signal.SIGUSR1, requeued=False) == 128 + signal.SIGUSR1


def test_slurm_validation_accepts_a_matching_job(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM_NTASKS=4, SLURM_NTASKS_PER_NODE=2, SLURM_NNODES=2, SLURM_JOB_NAME="train")
    SLURMEnvironment().validate_settings(num_devices=2, num_nodes=2)
    set_env(monkeypatch, SLURM_NTASKS_PER_NODE="2(x2)")
    SLURMEnvironment().validate_settings(num_devices=2, num_nodes=2)


def test_slurm_validation_rejects_other_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM_NTASKS=4, SLURM_NTASKS_PER_NODE=2, SLURM_NNODES=2, SLURM_JOB_NAME="train")
    with pytest.raises(InvalidConfigError, match=r"devices=4.*--ntasks-per-node=2.*Set `devices=2`"):
        SLURMEnvironment().validate_settings(num_devices=4, num_nodes=2)


def test_slurm_validation_rejects_other_num_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM_NTASKS=4, SLURM_NTASKS_PER_NODE=2, SLURM_NNODES=2, SLURM_JOB_NAME="train")
    with pytest.raises(InvalidConfigError, match=r"num_nodes=1.*--nodes=2.*Set `num_nodes=2`"):
        SLURMEnvironment().validate_settings(num_devices=2, num_nodes=1)


def test_slurm_rejects_ntasks_without_ntasks_per_node_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM_NTASKS=4, SLURM_JOB_NAME="train")
    with pytest.raises(InvalidConfigError, match=r"You set `--ntasks=4`.*not supported.*--ntasks-per-node=4") as error:
        SLURMEnvironment()
    assert isinstance(error.value, RuntimeError)  # what Lightning raises there
    lightning_slurm = pytest.importorskip("lightning_fabric.plugins.environments.slurm")
    with pytest.raises(RuntimeError, match=r"You set `--ntasks=4`.*not supported"):
        lightning_slurm.SLURMEnvironment()


def test_slurm_names_a_local_id_beyond_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    # No `--ntasks-per-node` to compare with (one task here), but a local id past the devices.
    set_env(monkeypatch, SLURM_NTASKS=1, SLURM_LOCALID=3, SLURM_JOB_NAME="train")
    with pytest.raises(InvalidConfigError, match=r"SLURM_LOCALID=3.*devices=2.*local ranks 0 to 1") as error:
        SLURMEnvironment().validate_settings(num_devices=2, num_nodes=1)
    assert not isinstance(error.value, IndexError)


def test_slurm_validation_skips_interactive_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, SLURM_NTASKS=4, SLURM_NTASKS_PER_NODE=4, SLURM_NNODES=1, SLURM_JOB_NAME="bash")
    SLURMEnvironment().validate_settings(num_devices=1, num_nodes=1)


# -- lsf ---------------------------------------------------------------------------------------------------


def lsf_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hosts: list[str]) -> None:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("\n".join(["launch-node", *hosts, ""]))
    set_env(
        monkeypatch,
        LSB_JOBID=4242,
        LSB_DJOB_RANKFILE=rankfile,
        JSM_NAMESPACE_SIZE=len(hosts),
        JSM_NAMESPACE_RANK=2,
        JSM_NAMESPACE_LOCAL_RANK=0,
    )


def test_lsf_is_detected_only_with_every_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert not LSFEnvironment.detect()
    lsf_job(monkeypatch, tmp_path, ["a", "b"])
    assert LSFEnvironment.detect()
    monkeypatch.delenv("JSM_NAMESPACE_SIZE")
    assert not LSFEnvironment.detect()


def test_lsf_port_and_address_are_lightnings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lightning_lsf = pytest.importorskip("lightning_fabric.plugins.environments.lsf")
    me = socket.gethostname()
    lsf_job(monkeypatch, tmp_path, ["other", me])
    env = LSFEnvironment()
    ours = (env.main_address, env.main_port, env.node_rank())  # read before Lightning sets MASTER_* below
    theirs = lightning_lsf.LSFEnvironment()  # sets MASTER_ADDR and MASTER_PORT, restored by monkeypatch
    assert ours == (theirs.main_address, theirs.main_port, theirs.node_rank()) == ("other", 10000 + 4242 % 1000, 1)


@pytest.mark.parametrize("missing", ["LSB_JOBID", "LSB_DJOB_RANKFILE"])
def test_lsf_reports_a_missing_variable_at_construction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, missing: str
) -> None:
    lsf_job(monkeypatch, tmp_path, ["a"])
    monkeypatch.delenv(missing)
    with pytest.raises(InvalidConfigError, match=missing):
        LSFEnvironment()


def test_lsf_reads_the_rank_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    me = socket.gethostname()
    lsf_job(monkeypatch, tmp_path, ["other", "other", me, me])
    env = LSFEnvironment()
    assert env.creates_processes_externally
    assert env.compute_hosts() == ["other", "other", me, me]
    assert env.main_address == "other"
    assert env.main_port == 10000 + 4242 % 1000
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (4, 2, 0, 1)
    env.validate_settings(num_devices=2, num_nodes=2)
    with pytest.raises(InvalidConfigError, match="jsrun started 4"):
        env.validate_settings(num_devices=1, num_nodes=2)


def test_lsf_matches_short_and_qualified_host_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lsf_job(monkeypatch, tmp_path, ["other", f"{socket.gethostname()}.cluster.example"])
    assert LSFEnvironment().node_rank() == 1


def test_lsf_rendezvous_can_be_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lsf_job(monkeypatch, tmp_path, ["a"])
    set_env(monkeypatch, MASTER_ADDR="head", MASTER_PORT=30000)
    env = LSFEnvironment()
    assert (env.main_address, env.main_port) == ("head", 30000)


def test_lsf_names_a_host_missing_from_the_rank_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lsf_job(monkeypatch, tmp_path, ["elsewhere-1", "elsewhere-2"])
    with pytest.raises(InvalidConfigError, match=r"not among the compute hosts.*elsewhere-1, elsewhere-2"):
        LSFEnvironment().node_rank()


def test_lsf_rejects_a_rank_file_without_compute_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lsf_job(monkeypatch, tmp_path, [])
    with pytest.raises(InvalidConfigError, match="lists no compute host"):
        LSFEnvironment()


def test_lsf_rejects_a_missing_rank_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    set_env(monkeypatch, LSB_DJOB_RANKFILE=tmp_path / "absent")
    with pytest.raises(InvalidConfigError, match="Cannot read the LSF rank file"):
        LSFEnvironment()


# -- kubeflow ----------------------------------------------------------------------------------------------


def test_kubeflow_is_never_detected_but_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, MASTER_ADDR="master-0", MASTER_PORT=23456, WORLD_SIZE=3, RANK=2)
    with pytest.raises(NotImplementedError, match="can't be detected automatically"):
        KubeflowEnvironment.detect()  # as in Lightning; the registry probes with `never_detected` instead
    env = KubeflowEnvironment()
    assert env.creates_processes_externally
    assert (env.main_address, env.main_port) == ("master-0", 23456)
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (3, 2, 0, 2)


def test_kubeflow_names_a_missing_variable() -> None:
    with pytest.raises(InvalidConfigError, match="MASTER_ADDR is not set"):
        _ = KubeflowEnvironment().main_address


# -- mpi ---------------------------------------------------------------------------------------------------

_MPI_REPORT = """
import json, os
from fabric_core.environments.mpi import MPIEnvironment
report = {"detect": MPIEnvironment.detect()}
if report["detect"]:
    env = MPIEnvironment()
    report.update(
        address=env.main_address, port=env.main_port, world=env.world_size(), rank=env.global_rank(),
        local=env.local_rank(), node=env.node_rank(), external=env.creates_processes_externally,
    )
with open(os.path.join(os.environ["REPORT_DIR"], f"{os.getpid()}.json"), "w") as f:
    json.dump(report, f)
"""


def run_under_mpiexec(tmp_path: Path, n: int, **variables: str) -> list[dict[str, object]]:
    """Run the report script on ``n`` real MPI ranks (mpiexec from the ``mpich`` wheel)."""
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py and mpiexec are not installed (pip install mpi4py mpich)")
    env = {k: v for k, v in os.environ.items() if k not in _NAMES}
    env.update(variables, REPORT_DIR=str(tmp_path))
    subprocess.run(
        [mpiexec, "-n", str(n), sys.executable, "-c", _MPI_REPORT],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    reports = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    return sorted(reports, key=lambda r: int(r.get("rank", 0)))


def test_mpi_is_not_detected_outside_a_launcher_and_does_not_initialise_mpi() -> None:
    code = (
        "import sys; from fabric_core.environments.mpi import MPIEnvironment as M; "
        "print(M.detect(), 'mpi4py.MPI' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k not in _NAMES}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_mpi_ranks_read_the_topology_from_real_mpi(tmp_path: Path) -> None:
    reports = run_under_mpiexec(tmp_path, 2)
    assert [r["rank"] for r in reports] == [0, 1]
    for r in reports:
        assert (r["detect"], r["world"], r["node"], r["external"]) == (True, 2, 0, True)
    assert [r["local"] for r in reports] == [0, 1]
    assert reports[0]["address"] == reports[1]["address"] == socket.gethostname()
    assert reports[0]["port"] == reports[1]["port"]  # rank 0's free port, broadcast to everyone


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_mpi_rank_zero_honours_master_addr_and_port(tmp_path: Path) -> None:
    reports = run_under_mpiexec(tmp_path, 2, MASTER_ADDR="127.0.0.1", MASTER_PORT="28011")
    assert {(r["address"], r["port"]) for r in reports} == {("127.0.0.1", 28011)}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_mpi_single_rank_is_not_detected(tmp_path: Path) -> None:
    assert run_under_mpiexec(tmp_path, 1) == [{"detect": False}]


def test_slurm_warns_when_srun_exists_but_did_not_start_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    with pytest.warns(PossibleUserWarning, match="The `srun` command is available on your system but is not used"):
        SLURMEnvironment()
    set_env(monkeypatch, SLURM_NTASKS=1)  # started by srun: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SLURMEnvironment()
