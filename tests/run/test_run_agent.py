"""What ``fabric-core run`` changes in the torch elastic agent of its own process, and that it puts it back.

The restart lines themselves are checked on real jobs in ``test_run_restarts.py``.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch.distributed.elastic.rendezvous import dynamic_rendezvous
from torch.distributed.launcher import api

from fabric_core._run.agent import collection_deferred, launcher_agent, method_name, resume_collection


def _outer_caller() -> tuple[str, str]:
    return _inner_caller()


def _inner_caller() -> tuple[str, str]:
    # torch's default depth 2 names the caller of the function that asks: `_outer_caller`
    return dynamic_rendezvous.get_method_name(), method_name()


def test_event_names_are_torchs() -> None:
    torch_name, ours = _outer_caller()
    assert torch_name == ours == "_outer_caller"
    for depth in (1, 2, 3, 5):
        assert method_name(depth) == dynamic_rendezvous.get_method_name(depth), depth
    assert method_name(10_000) == dynamic_rendezvous.get_method_name(10_000) == "no_method_name"


def _sleeps(seconds: float | tuple[float, float]) -> float:
    start = time.perf_counter()
    dynamic_rendezvous._delay(seconds=seconds)
    return time.perf_counter() - start


@pytest.mark.parametrize("num_nodes", [1, 2])
def test_only_a_one_node_job_skips_the_first_rounds_skew(num_nodes: int) -> None:
    originals = (api.LocalElasticAgent, dynamic_rendezvous.get_method_name, dynamic_rendezvous._delay)
    with launcher_agent(num_nodes):
        assert api.LocalElasticAgent is not originals[0]
        assert issubclass(api.LocalElasticAgent, originals[0])
        assert dynamic_rendezvous.get_method_name is method_name
        skew = _sleeps((0.25, 0.3))
        backoff = _sleeps(0.25)  # the wait while a round is being decided stays, one node or many
    assert backoff >= 0.25
    if num_nodes == 1:
        assert skew < 0.2
    else:
        assert skew >= 0.25
    assert (api.LocalElasticAgent, dynamic_rendezvous.get_method_name, dynamic_rendezvous._delay) == originals


def test_everything_is_put_back_when_the_run_fails() -> None:
    originals = (api.LocalElasticAgent, dynamic_rendezvous.get_method_name, dynamic_rendezvous._delay)
    with pytest.raises(RuntimeError, match="worker failed"), launcher_agent(1):
        raise RuntimeError("worker failed")
    assert (api.LocalElasticAgent, dynamic_rendezvous.get_method_name, dynamic_rendezvous._delay) == originals


def test_the_launcher_collects_garbage_again_once_its_workers_start_or_it_fails() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()  # another test (the bench harness) may have frozen objects already
    resume_collection()
    assert gc.isenabled() and gc.get_freeze_count() == frozen  # nothing deferred: nothing to resume or freeze
    try:
        with collection_deferred():
            assert not gc.isenabled()
            with launcher_agent(1):
                assert not gc.isenabled()  # entering the agent does not resume it: starting the workers does
            resume_collection()  # what the agent's `_start_workers` calls once they run
            assert gc.isenabled()
            assert gc.get_freeze_count() > frozen  # what the launcher held then is frozen
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()  # the rest of the session collects as before
    frozen = gc.get_freeze_count()
    with pytest.raises(RuntimeError, match="bad option"), collection_deferred():
        raise RuntimeError("bad option")  # a run refused before any worker starts
    assert gc.isenabled() and gc.get_freeze_count() == frozen  # collecting again, nothing frozen
    gc.disable()  # a caller that runs without the collector keeps it off
    try:
        with collection_deferred():
            pass
        resume_collection()
        assert not gc.isenabled()
    finally:
        gc.enable()


_LAUNCHER = """
import gc, json, sys
from fabric_core.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("devices", ["2", "0"])
def test_a_real_launcher_collects_again_after_its_workers_start(tmp_path: Path, devices: str) -> None:
    """The launcher process itself, after a real 2-process job (frozen at the workers' start) and after a job
    refused before any worker (``--devices 0``: collecting again, nothing frozen)."""
    script = tmp_path / "job.py"
    script.write_text("import torch\nfrom fabric_core import Fabric\nFabric().barrier()\n")
    options = ["run", "--accelerator", "cpu", "--devices", devices, "--strategy", "ddp", str(script)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRIC_CORE_", "MASTER_", "TORCHELASTIC"))}
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *options], capture_output=True, text=True, timeout=180, env=env
    )
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["enabled"], done.stderr[-2000:]
    if devices == "2":
        assert state["code"] == 0 and state["frozen"] > 100_000, (state, done.stderr[-2000:])
    else:
        assert state["code"] == 2 and state["frozen"] == 0, (state, done.stderr[-2000:])
