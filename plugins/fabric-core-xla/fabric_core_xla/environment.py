"""The cluster environment of XLA jobs: ranks come from torch_xla's runtime."""

from __future__ import annotations

import functools
import logging
from typing import Any

from fabric_core.environments.environment import ClusterEnvironment
from fabric_core_xla import accelerator, device

__all__ = ["XLAEnvironment"]

log = logging.getLogger(__name__)
# Lightning's flag at its ``plugins.environments.xla`` path (this module backs it), read here at call time.
_XLA_AVAILABLE = accelerator.XLA_AVAILABLE


def _runtime() -> Any:
    # The attribute of the package (not `import torch_xla.runtime`), as Lightning reads it: a stand-in package
    # in `sys.modules` (Lightning's tests simulate XLA so) then answers too.
    from torch_xla import runtime

    return runtime


class XLAEnvironment(ClusterEnvironment):
    """Reads ranks from the XLA runtime, which assigns them to the processes ``xmp.spawn`` starts.

    The runtime also does its own rendezvous, so there is no address or port to give, and the world size
    and ranks cannot be set from outside. Only call the rank methods inside the spawned processes: asking
    the runtime starts it, after which this process can no longer spawn any.

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        device.require_torch_xla(type(self).__name__, _XLA_AVAILABLE)
        super().__init__(*args, **kwargs)  # Lightning's signature: what a subclass passes reaches the base

    @property
    def creates_processes_externally(self) -> bool:
        """False: ``xmp.spawn`` starts the processes, from ``fabric.launch``."""
        return False

    @property
    def main_address(self) -> str:
        """Not used: the XLA runtime does its own rendezvous.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError("The XLA runtime does its own rendezvous; it has no main address to give.")

    @property
    def main_port(self) -> int:
        """Not used: the XLA runtime does its own rendezvous.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError("The XLA runtime does its own rendezvous; it has no main port to give.")

    @staticmethod
    def detect() -> bool:
        """Whether this host has XLA devices (``XLAAccelerator.is_available()``, asked at call time)."""
        return bool(accelerator.XLAAccelerator.is_available())

    # Asked of the runtime once, as Lightning does (its tests clear the cache with `.cache_clear()`); the one
    # environment object of a process is what the cache holds on to.
    @functools.lru_cache(maxsize=1)  # noqa: B019
    def world_size(self) -> int:
        """The number of processes (replicas) in the job."""
        return int(_runtime().world_size())

    def set_world_size(self, size: int) -> None:
        """Ignored: the runtime decides the world size."""

    # Asked of the runtime once, as Lightning does (its tests clear the cache with `.cache_clear()`); the one
    # environment object of a process is what the cache holds on to.
    @functools.lru_cache(maxsize=1)  # noqa: B019
    def global_rank(self) -> int:
        """This process's ordinal among all processes."""
        return int(_runtime().global_ordinal())

    def set_global_rank(self, rank: int) -> None:
        """Ignored: the runtime decides the ranks."""

    # Asked of the runtime once, as Lightning does (its tests clear the cache with `.cache_clear()`); the one
    # environment object of a process is what the cache holds on to.
    @functools.lru_cache(maxsize=1)  # noqa: B019
    def local_rank(self) -> int:
        """This process's ordinal on its host."""
        return int(_runtime().local_ordinal())

    # Asked of the runtime once, as Lightning does (its tests clear the cache with `.cache_clear()`); the one
    # environment object of a process is what the cache holds on to.
    @functools.lru_cache(maxsize=1)  # noqa: B019
    def node_rank(self) -> int:
        """The index of this host among the job's hosts."""
        return int(_runtime().host_index())
