"""The hang watchdog thread lives as long as what it watches (issue 37, item 2).

Test suites that look for threads a test left behind (Lightning's ``thread_police`` fixture among them) call
``stop()`` on a leftover daemon thread and then require it dead; a thread without a process group is never
started; one whose group is destroyed ends by itself.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from unittest import mock

import pytest
import torch

from fabric_core._distributed import watchdog
from fabric_core.accelerators.cpu import CPUAccelerator
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.precision.precision import Precision
from fabric_core.strategies.parallel import ParallelStrategy

NAME = "fabric-core-hang-watchdog"


def watchdogs() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == NAME]


def connected(strategy: ParallelStrategy) -> ParallelStrategy:
    """``strategy`` connected as ``Fabric(accelerator="cpu", devices=1)`` would connect it."""
    strategy.connect(
        accelerator=CPUAccelerator(),
        precision=Precision(),
        checkpoint_io=None,
        cluster_environment=LightningEnvironment(),
        parallel_devices=[torch.device("cpu")],
        num_nodes=1,
    )
    return strategy


def one_process_strategy() -> ParallelStrategy:
    return connected(ParallelStrategy(timeout=timedelta(seconds=30)))


def wait_until_gone(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while watchdogs() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not watchdogs()


@pytest.fixture(autouse=True)
def _no_leftover_watchdog() -> None:
    """End the thread of an earlier test in this worker, as a leftover-thread check would.

    conftest.py destroys the process group a test leaves, and its thread then ends by itself within one
    interval (5 s at the default threshold): long enough to be seen here when this file runs right after it.
    """
    for thread in watchdogs():
        thread.stop()  # type: ignore[attr-defined]


@pytest.fixture
def fast_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(watchdog.HANG_WARN_VARIABLE, "0.2")  # samples every 0.05 s
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert not watchdogs()


@pytest.mark.usefixtures("fast_watchdog")
def test_no_thread_starts_when_init_process_group_is_mocked() -> None:
    # Lightning's test_set_timeout: the group is never created, so there is nothing to watch.
    with mock.patch("torch.distributed.init_process_group") as init:
        one_process_strategy().setup_environment()
    assert init.call_args.kwargs["device_id"] is None  # passed for the CPU too, as Lightning does
    assert not watchdogs()


@pytest.mark.usefixtures("fast_watchdog")
def test_teardown_ends_the_thread_at_once() -> None:
    strategy = one_process_strategy()
    strategy.setup_environment()
    (thread,) = watchdogs()
    strategy.teardown()
    assert not thread.is_alive()


@pytest.mark.usefixtures("fast_watchdog")
def test_stop_on_the_thread_ends_it_as_a_leftover_thread_check_requires() -> None:
    strategy = one_process_strategy()
    strategy.setup_environment()
    (thread,) = watchdogs()
    assert thread.daemon
    thread.stop()  # type: ignore[attr-defined]
    assert not thread.is_alive()
    strategy.teardown()


@pytest.mark.usefixtures("fast_watchdog")
def test_a_destroyed_group_ends_the_thread_and_the_next_group_gets_a_new_one() -> None:
    strategy = one_process_strategy()
    strategy.setup_environment()
    (first,) = watchdogs()
    torch.distributed.destroy_process_group()  # not through the strategy
    assert wait_until_gone(5)
    strategy.setup_environment()
    (second,) = watchdogs()
    assert second is not first
    strategy.teardown()
    assert not watchdogs()


def test_model_parallel_builds_its_mesh_through_lightnings_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's test_model_parallel.py::test_set_timeout patches `_setup_device_mesh` with the group mocked.
    model_parallel = pytest.importorskip("fabric_core_fsdp.model_parallel")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    strategy = connected(model_parallel.ModelParallelStrategy(parallelize_fn=lambda module, _: module))
    with (
        mock.patch.object(model_parallel, "_setup_device_mesh") as mesh,
        mock.patch("torch.distributed.init_process_group"),
    ):
        strategy.setup_environment()
    mesh.assert_called_once()
    assert not watchdogs()


def test_a_store_whose_server_is_gone_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rank 0 (the store's server) has finished: connecting again would retry for the whole group timeout, and
    # the strategy's teardown, which waits for the thread, with it.
    server = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60))  # any port
    client = torch.distributed.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=60))
    prefixed = torch.distributed.PrefixStore("default_pg", client)
    monkeypatch.setattr(torch.distributed.distributed_c10d, "_get_default_store", lambda: prefixed)
    alive = watchdog._Watch(rank=1, world_size=2, warn=1.0, abort=0.0)
    assert alive.connect() is not None  # the server answers: a connection of the thread's own
    del server
    gone = watchdog._Watch(rank=1, world_size=2, warn=1.0, abort=0.0)
    started = time.monotonic()
    assert gone.connect() is None
    assert time.monotonic() - started < 2.0
