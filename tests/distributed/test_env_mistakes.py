"""A mistake in the variables that place a process ends the job in seconds with an error naming the variable.

Each case runs tests/_jobs/env_job.py (two ranks through the popen launcher) in its own session with one bad
variable; before the checks each of these hung until the 30-minute rendezvous timeout, or raised IndexError.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from fabric_core.environments._env import find_free_network_port
from fabric_core.testing import run_in_own_session

JOB = Path(__file__).parents[1] / "_jobs" / "env_job.py"
PLACEMENT = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_RANK", "RANK", "GROUP_RANK")

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


def run_job(env: dict[str, str], deadline: float = 90) -> tuple[int, str, float]:
    base = {k: v for k, v in os.environ.items() if k not in PLACEMENT}
    start = time.monotonic()
    result = run_in_own_session([sys.executable, str(JOB)], timeout=deadline, env={**base, **env})
    return result.returncode, result.stdout, time.monotonic() - start


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"LOCAL_RANK": "1"}, "InvalidConfigError: This process is rank 1 of 2 (LOCAL_RANK=1), but MASTER_PORT"),
        ({"MASTER_PORT": "0"}, "InvalidConfigError: MASTER_PORT=0 is not a port"),
        ({"MASTER_ADDR": "256.1.1.1"}, "InvalidConfigError: MASTER_ADDR='256.1.1.1' is neither an IP address"),
        ({"MASTER_ADDR": "no-such-host.invalid"}, "InvalidConfigError: MASTER_ADDR='no-such-host.invalid' does not"),
        ({"LOCAL_RANK": "5"}, "InvalidConfigError: LOCAL_RANK=5, but this job has 2 device(s) on each node"),
        ({"WORLD_SIZE": "0"}, "InvalidConfigError: The environment variable WORLD_SIZE='0' must be an integer >= 1"),
    ],
    ids=["local-rank-alone", "port-0", "bad-ip", "unknown-host", "local-rank-too-high", "world-size-0"],
)
def test_a_bad_variable_fails_at_once_naming_it(env: dict[str, str], error: str) -> None:
    code, output, _ = run_job(env)
    assert code == 1, output
    assert error in output
    assert "IndexError" not in output


def test_a_rank_whose_peers_never_come_gives_up_after_the_rendezvous_timeout() -> None:
    # LOCAL_RANK=1 with a port nobody listens on: rank 1 waits for a rank 0 that was never started.
    port = str(find_free_network_port())
    env = {"LOCAL_RANK": "1", "MASTER_PORT": port, "FABRIC_CORE_RENDEZVOUS_TIMEOUT": "3"}
    code, output, seconds = run_job(env)
    assert code == 1, output
    assert (
        f"RendezvousError: Rank 1 of 2 (LOCAL_RANK=1) could not meet the other processes at 127.0.0.1:{port}" in output
    )
    assert "within 3 s (FABRIC_CORE_RENDEZVOUS_TIMEOUT)" in output
    assert f"MASTER_PORT={port}" in output and "LOCAL_RANK=1" in output
    assert seconds < 90


def test_the_same_job_with_a_sound_environment_runs() -> None:
    code, output, _ = run_job({})
    assert code == 0, output
    assert "rank 0 reduced 2.0" in output and "rank 1 reduced 2.0" in output


@pytest.mark.parametrize(
    ("variable", "read"),
    [
        ("FABRIC_CORE_RENDEZVOUS_TIMEOUT", "fabric_core._distributed.rendezvous:rendezvous_timeout"),
        ("FABRIC_CORE_EXIT_TIMEOUT", "fabric_core._distributed.exit_handshake:exit_timeout"),
        ("FABRIC_CORE_HANG_WARN_SECONDS", "fabric_core._distributed.watchdog:hang_warn_seconds"),
        ("FABRIC_CORE_HANG_ABORT_SECONDS", "fabric_core._distributed.watchdog:hang_abort_seconds"),
    ],
)
@pytest.mark.parametrize("raw", ["soon", "-1", "inf", "nan"])
def test_a_malformed_delay_is_an_error_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, read: str, raw: str
) -> None:
    import importlib

    from fabric_core.errors import InvalidConfigError

    module, name = read.split(":")
    monkeypatch.setenv(variable, raw)
    with pytest.raises(InvalidConfigError, match=f"{variable}='{raw}'") as caught:
        getattr(importlib.import_module(module), name)()
    assert caught.value.argument == variable


@pytest.mark.parametrize("raw", ["on?", "2", "enabled"])
def test_a_malformed_collective_check_switch_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    from fabric_core._distributed import collective_check
    from fabric_core.errors import InvalidConfigError

    monkeypatch.setenv("FABRIC_CORE_CHECK_COLLECTIVES", raw)
    expected = re.escape(f"FABRIC_CORE_CHECK_COLLECTIVES='{raw}' is not a boolean")
    with pytest.raises(InvalidConfigError, match=expected) as caught:
        collective_check.configure()
    assert caught.value.argument == "FABRIC_CORE_CHECK_COLLECTIVES"
    assert not collective_check.checking
