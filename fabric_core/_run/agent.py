"""The elastic agent that ``fabric-core run`` drives in its own process: what it says, and what it costs.

:func:`launcher_agent` changes three things of the agent torchrun builds in this process, and puts them back
on exit; and the launcher collects no garbage until its workers have started (:func:`collection_deferred`):

- **Restarts are reported.** torch's agent restarts the worker group after a failure (``--max-restarts``)
  but says so only at INFO level, which torchrun does not show; its ERROR line names the local rank of the
  first failure but not that a restart follows. The agent prints one line per restart: who died, how, and
  which restart of how many begins.
- **Events are named from the frame.** torch's dynamic (c10d) rendezvous names the method of each event it
  records with two calls to ``inspect.stack()``, before it checks whether any handler records events (none
  does by default). ``inspect.stack()`` reads the source of every frame and, per frame, may search the
  thousand-odd modules torch has loaded (CPython issue 92041). The same name is read from the frame itself.
- **One node does not wait for others.** Before its first round the c10d rendezvous sleeps a random 0 to
  0.3 s, so that the agents of many nodes do not reach the store at once. A one-node job has no other agent:
  it skips that sleep (150 ms on average before any worker starts). Its other waits (the 1 s back-off while
  a round is being decided) stay, and with several nodes nothing changes.
- **No garbage collection before the workers start.** Importing torch leaves a few hundred thousand objects
  that live as long as the process, and CPython's full collections scan them again and again while the
  import goes on: 0.2-0.3 s of the launcher's start on a 2-core machine, on the way to every worker. What
  the launcher allocates before its workers start it keeps, so it collects nothing until then. It then freezes what it
  holds (:func:`gc.freeze`: later collections skip it) and collects as usual while it watches the workers.
  Only the launcher does this: the workers run the user's script with Python's defaults.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["collection_deferred", "describe_exit", "launcher_agent", "method_name", "resume_collection"]

_NO_NAME = "no_method_name"  # what torch names an event recorded too near the top of the stack


def method_name(depth: int = 2) -> str:
    """The function ``depth`` frames above this one, as torch's ``get_method_name`` answers, read from the frame
    (``1``: the caller; ``2``, torch's default: the caller's caller)."""
    try:
        return sys._getframe(depth).f_code.co_name
    except ValueError:  # the stack is not that deep
        return _NO_NAME


_deferred = False  # whether collection_deferred() turned the collector off and nothing has turned it on since


@contextlib.contextmanager
def collection_deferred() -> Iterator[None]:
    """Collect no garbage inside, until :func:`resume_collection` (the launcher: from before it imports torch).

    On exit the collector is on again, without a freeze, if the workers never started (an error before them,
    or a caller that runs the command in its own process); a collector the caller had turned off stays off.
    """
    global _deferred
    if not gc.isenabled():
        yield
        return
    gc.disable()
    _deferred = True
    try:
        yield
    finally:
        if _deferred:
            _deferred = False
            gc.enable()


def resume_collection() -> None:
    """Freeze what this process holds and collect garbage again, if :func:`collection_deferred` stopped it."""
    global _deferred
    if _deferred:
        _deferred = False
        gc.freeze()
        gc.enable()


def describe_exit(code: int) -> str:
    """``was killed by signal N`` for a negative exit code ``-N``, else ``exited with code N``."""
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


@contextlib.contextmanager
def launcher_agent(num_nodes: int) -> Iterator[None]:
    """While inside, the elastic agents that torchrun builds in this process behave as the module says.

    Only the launcher process calls this (``fabric-core run`` owns it).

    Args:
        num_nodes: The job's number of nodes (``--num-nodes``): with one, the first round does not wait.
    """
    from torch.distributed.elastic.agent.server.api import WorkerState
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous
    from torch.distributed.launcher import api

    class ReportingAgent(LocalElasticAgent):
        _restarts_reported = 0

        def _start_workers(self, worker_group: Any) -> Any:
            try:
                return super()._start_workers(worker_group)
            finally:
                resume_collection()

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

    # The agent class is an import in torch's launcher module, not one of its exports.
    changes: dict[tuple[Any, str], Any] = {(api, "LocalElasticAgent"): ReportingAgent}
    if hasattr(dynamic_rendezvous, "get_method_name"):
        changes[dynamic_rendezvous, "get_method_name"] = method_name
    delay = getattr(dynamic_rendezvous, "_delay", None)
    if num_nodes == 1 and delay is not None:

        def no_skew(seconds: float | tuple[float, float]) -> None:
            if not isinstance(seconds, tuple):  # a random range is the first round's skew across nodes
                delay(seconds)

        changes[dynamic_rendezvous, "_delay"] = no_skew
    saved = {key: getattr(*key) for key in changes}
    for (module, name), value in changes.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
