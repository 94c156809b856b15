"""Saying, on the launcher's stderr, which worker died when ``fabric-core run`` restarts every worker.

torch's elastic agent restarts the worker group after a failure (``--max-restarts``) but says so only at
INFO level, which torchrun does not show; its ERROR line names the local rank of the first failure but not
that a restart follows. :func:`reporting_restarts` makes the agent that torchrun builds in this process
print one line per restart: who died, how, and which restart of how many begins.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["describe_exit", "reporting_restarts"]


def describe_exit(code: int) -> str:
    """``was killed by signal N`` for a negative exit code ``-N``, else ``exited with code N``."""
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


@contextlib.contextmanager
def reporting_restarts() -> Iterator[None]:
    """While inside, the elastic agents that torchrun builds in this process report each restart.

    Only the launcher process calls this (``fabric-core run`` owns it); the agent class is put back on exit.
    """
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.launcher import api

    launcher: Any = api  # the agent class is an import there, not in the module's exports

    class ReportingAgent(LocalElasticAgent):
        _restarts_reported = 0

        def _monitor_workers(self, worker_group: Any) -> Any:
            result = super()._monitor_workers(worker_group)
            allowed = worker_group.spec.max_restarts
            if result.state in (WorkerState.FAILED, WorkerState.UNHEALTHY) and self._restarts_reported < allowed:
                # The agent restarts the group right after this returns (it has restarts left).
                self._restarts_reported += 1
                if result.failures:
                    rank, failure = min(result.failures.items(), key=lambda item: item[1].timestamp)
                    who = f"rank {rank} (pid {failure.pid}) {describe_exit(failure.exitcode)}"
                else:
                    who = "the worker group became unhealthy"
                print(
                    f"fabric-core run: {who}; restarting every worker ({self._restarts_reported} of {allowed}, "
                    "--max-restarts).",
                    file=sys.stderr,
                    flush=True,
                )
            return result

    original = launcher.LocalElasticAgent
    launcher.LocalElasticAgent = ReportingAgent
    try:
        yield
    finally:
        launcher.LocalElasticAgent = original
