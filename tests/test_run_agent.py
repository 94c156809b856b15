"""What ``fabric-core run`` changes in the torch elastic agent of its own process, and that it puts it back.

The restart lines themselves are checked on real jobs in ``test_run_restarts.py``.
"""

from __future__ import annotations

import gc
import time

import pytest
from torch.distributed.elastic.rendezvous import dynamic_rendezvous
from torch.distributed.launcher import api

from fabric_core._run_agent import defer_collection, launcher_agent, method_name


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


def test_the_launcher_collects_garbage_again_once_its_agent_is_done() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()  # another test (the bench harness) may have frozen objects already
    with launcher_agent(1):
        assert gc.isenabled()  # collection is deferred by the launcher only, not by entering the agent
    assert gc.get_freeze_count() == frozen  # nothing was deferred: nothing more frozen
    try:
        defer_collection()
        assert not gc.isenabled()
        with launcher_agent(1):
            assert not gc.isenabled()  # until the workers start (the agent's `_start_workers`)
        assert gc.isenabled()  # a run that ended before starting any worker collects again
        assert gc.get_freeze_count() > frozen  # and what the launcher held when it resumed is frozen
    finally:
        gc.enable()
        gc.unfreeze()  # the rest of the session collects as before
