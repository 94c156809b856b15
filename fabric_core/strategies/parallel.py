"""The base of every multi-process strategy: ranks, the process group, and the collectives."""

from __future__ import annotations

import atexit
import gc
import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from fabric_core._deferred import lightning_reexports
from fabric_core._distributed import collective_check, collectives, exit_handshake, rendezvous, watchdog
from fabric_core.environments._env import check_process_variables
from fabric_core.errors import ArgumentTypeError, InvalidConfigError, UnknownOptionError
from fabric_core.launchers.launcher import START_METHODS
from fabric_core.launchers.multiprocessing import MultiProcessingLauncher
from fabric_core.launchers.subprocess_script import SubprocessScriptLauncher
from fabric_core.strategies.strategy import Strategy
from fabric_core.strategies.wiring import DEFAULT_PG_TIMEOUT, PARALLEL_WIRING_ORDER, ParallelWiring, Placement, wired
from fabric_core.utilities.apply_func import apply_to_collection, convert_to_tensors
from fabric_core.utilities.rank_zero import rank_zero_info, show_info_lines

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fabric_core.environments.environment import ClusterEnvironment

#: Whether this torch build has torch.distributed at all (fixed for the process; asked on every collective).
_DIST_AVAILABLE: Final = collectives.DIST_AVAILABLE  # read on the all_reduce fast path: a global, not an attribute
_distributed: Final = collectives.distributed

__all__ = ["DEFAULT_PG_TIMEOUT", "START_METHODS", "ParallelStrategy", "as_timeout", "check_forwarded_options"]

T = TypeVar("T")
_log = logging.getLogger(__name__)


def as_timeout(timeout: Any, owner: str) -> timedelta:
    """Return the process-group ``timeout`` as a ``timedelta``: given as one, as seconds, or ``None`` (default).

    Raises:
        ArgumentTypeError: Not a ``timedelta``, a number or ``None`` (torch would fail at launch).
        InvalidConfigError: Zero or negative.
    """
    if timeout is None:
        return DEFAULT_PG_TIMEOUT
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    elif isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    else:
        raise ArgumentTypeError(
            f"`{owner}(timeout={timeout!r})`: the timeout must be a `datetime.timedelta` or a number of seconds "
            f"(e.g. `timedelta(minutes=30)` or `1800`), not {type(timeout).__name__}.",
            argument="timeout",
            value=timeout,
        )
    if not seconds > 0:  # also refuses NaN
        raise InvalidConfigError(
            f"`{owner}(timeout={timeout!r})`: the timeout must be positive: how long a collective waits for the "
            "other ranks, e.g. `timedelta(minutes=30)` or `1800` (seconds).",
            argument="timeout",
            value=timeout,
        )
    return timeout if isinstance(timeout, timedelta) else timedelta(seconds=seconds)


def check_forwarded_options(
    strategy: type, options: Mapping[str, Any], target: Callable[..., Any], *, reserved: Iterable[str] = ()
) -> None:
    """Refuse keyword arguments that a strategy's ``**kwargs`` would hand to ``target`` but it does not take.

    Checked when the strategy is built (at ``Fabric(...)``), not when ``target`` is called at ``setup``.

    Args:
        strategy: The strategy class, whose own parameters are listed as accepted too.
        options: The keyword arguments its ``**kwargs`` collected.
        target: What receives them (``DistributedDataParallel``, ``fully_shard``, ...).
        reserved: Parameters of ``target`` the strategy sets itself.

    Raises:
        UnknownOptionError: An option neither the strategy nor ``target`` takes (a ``TypeError`` too).
    """
    from fabric_core._signature import accepted_keywords

    forwarded = accepted_keywords(target)
    if forwarded is None:  # the target takes anything
        return
    forwarded = forwarded - {"module", *reserved}
    unknown = sorted(set(options) - forwarded)
    if unknown:
        own = {
            p.name
            for p in inspect.signature(strategy).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        }
        name = getattr(target, "__qualname__", repr(target))
        raise UnknownOptionError(
            f"{strategy.__name__}({unknown[0]}={options[unknown[0]]!r})",
            unknown[0],
            own | forwarded,
            owner=f"{strategy.__name__} (or `{name}`, which receives its other keyword arguments)",
            value=options[unknown[0]],
        )


class ParallelStrategy(Strategy):
    """Several devices; by default one process per device, joined by a ``torch.distributed`` process group.

    The ranks come from the cluster environment: this process's local and node rank, and the world size
    ``num_nodes * num_processes`` that the strategy records on it. :meth:`setup_environment` (run in
    every process by the launcher) creates the process group. Subclasses decide how modules are wrapped
    (``ddp``, ``fsdp``, ...) and which launcher starts the processes.

    A subclass that drives all its devices from one process (``dp``) declares ``single_process = True``: it
    then takes no cluster environment from selection (its ranks are 0 and its world size 1), joins no process
    group, and its one process reads the whole dataset. It stays a ``ParallelStrategy``, as in Lightning, so
    that ``isinstance(strategy, ParallelStrategy)`` keeps meaning "more than one device".

    Collectives act on tensors and nested collections of tensors; without a process group they are the
    identity, as in one process.

    Args:
        **wiring: The components selection connects (:class:`~fabric_core.strategies.wiring.ParallelWiring`),
            by Lightning's names: ``accelerator``, ``parallel_devices`` (one device per local process),
            ``cluster_environment`` (where the ranks come from), ``checkpoint_io``, ``precision``,
            ``process_group_backend`` (``"gloo"``, ``"nccl"``, ...; defaults to the accelerator's),
            ``timeout`` (how long collectives wait for the other ranks: a ``timedelta`` or seconds; ``None``
            is torch's 30 minutes) and ``start_method`` (how ``fabric.launch()`` starts the processes).

    Raises:
        InvalidConfigError: An unknown ``start_method``, or a ``timeout`` that is not positive (an
            ``ArgumentTypeError``, a ``TypeError`` too, when it is not a duration at all).
    """

    single_process: ClassVar[bool] = False
    #: `all_gather` takes a whole nested collection and packs it into as few collectives as it can.
    gathers_collections: ClassVar[bool] = True

    @wired(ParallelWiring, positional=PARALLEL_WIRING_ORDER[:5])  # Lightning's takes the first five by position
    def __init__(self, **wiring: Unpack[ParallelWiring]) -> None:
        super().__init__(
            accelerator=wiring.get("accelerator"),
            checkpoint_io=wiring.get("checkpoint_io"),
            precision=wiring.get("precision"),
        )
        start_method = wiring.get("start_method")
        if start_method is not None and start_method not in START_METHODS:
            raise InvalidConfigError(
                f"`{type(self).__name__}(start_method={start_method!r})` is not a start method. Valid choices: "
                f"{', '.join(repr(m) for m in START_METHODS)}.",
                argument="start_method",
                value=start_method,
            )
        self._start_method = start_method
        devices = wiring.get("parallel_devices")
        self._parallel_devices = list(devices) if devices is not None else None
        self._cluster_environment = wiring.get("cluster_environment")
        self._num_nodes = 1
        self._process_group_backend = wiring.get("process_group_backend")
        self._timeout = as_timeout(wiring.get("timeout"), type(self).__name__)
        self._exit_hook_registered = False
        self._device_for_collectives: torch.device | None = None
        # Not `_root_device`: Lightning users' subclasses set that name before calling this constructor.
        self._device_of_rank: torch.device | None = None

    # -- wiring ------------------------------------------------------------------------------------------
    def place(self, placement: Placement) -> None:
        """Take the devices and the environment (values set in the constructor win), record the ranks, pick a
        launcher."""
        if self._cluster_environment is None and not self.single_process:
            self._cluster_environment = placement.cluster_environment
        if self._parallel_devices is None:
            self._parallel_devices = list(placement.parallel_devices)
        self._num_nodes = placement.num_nodes
        self.set_world_ranks()
        self.configure_launcher()

    @property
    def start_method(self) -> str | None:
        """How ``fabric.launch()`` starts the other processes (``None``: it starts none)."""
        return self._start_method

    def configure_launcher(self) -> None:
        """Choose ``self._launcher`` from the start method; called at the end of :meth:`connect`.

        ``"popen"`` runs the script (or module) again for each other local rank; ``"spawn"``, ``"fork"`` and
        ``"forkserver"`` start workers that run the function given to ``fabric.launch(fn)``.
        """
        if self._start_method is None:
            return
        if self._start_method == "popen":
            assert self._cluster_environment is not None
            self._launcher = SubprocessScriptLauncher(self._cluster_environment, self.num_processes, self._num_nodes)
        else:
            self._launcher = MultiProcessingLauncher(self, start_method=self._start_method)

    @property
    def cluster_environment(self) -> ClusterEnvironment | None:
        return self._cluster_environment

    @cluster_environment.setter
    def cluster_environment(self, environment: ClusterEnvironment | None) -> None:
        self._cluster_environment = environment

    @property
    def parallel_devices(self) -> list[torch.device] | None:
        return self._parallel_devices

    @parallel_devices.setter
    def parallel_devices(self, devices: list[torch.device] | None) -> None:
        self._parallel_devices = list(devices) if devices is not None else None
        self._device_of_rank = None

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    @num_nodes.setter
    def num_nodes(self, num_nodes: int) -> None:
        self._num_nodes = num_nodes

    @property
    def num_processes(self) -> int:
        """Processes on each node: one per parallel device."""
        return len(self._parallel_devices) if self._parallel_devices is not None else 0

    @property
    def process_group_backend(self) -> str | None:
        """The backend of the process group: the one passed, else ``None`` until the group is created.

        As in Lightning, the default (the accelerator's backend) is chosen when the group is created.
        """
        return self._process_group_backend

    def _get_process_group_backend(self) -> str:
        """The backend a process group is created with: the one passed, else the accelerator's, else (no
        accelerator connected yet) torch's default for the device's type, as Lightning decides."""
        if self._process_group_backend is not None:
            return self._process_group_backend
        if self.accelerator is not None:
            return self.accelerator.process_group_backend
        try:
            device = self.root_device
        except RuntimeError:  # no devices either
            return "gloo"
        return collectives.default_backend_for_device(device) if isinstance(device, torch.device) else "gloo"

    # -- topology ----------------------------------------------------------------------------------------
    @property
    def global_rank(self) -> int:
        return self._cluster_environment.global_rank() if self._cluster_environment is not None else 0

    @property
    def local_rank(self) -> int:
        return self._cluster_environment.local_rank() if self._cluster_environment is not None else 0

    @property
    def node_rank(self) -> int:
        return self._cluster_environment.node_rank() if self._cluster_environment is not None else 0

    @property
    def world_size(self) -> int:
        return self._cluster_environment.world_size() if self._cluster_environment is not None else 1

    @property
    def root_device(self) -> torch.device:
        """This process's device: ``parallel_devices[local_rank]``.

        Raises:
            RuntimeError: The strategy has no devices yet (it was neither given any nor connected).
        """
        if self._device_of_rank is not None:
            return self._device_of_rank
        if not self._parallel_devices:
            raise RuntimeError(
                f"`{type(self).__name__}` has no devices: pass `parallel_devices=[...]` or let `Fabric(...)` "
                "connect it."
            )
        return self._parallel_devices[self.local_rank]

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        """Each process reads the shard of its global rank among ``num_nodes * num_processes`` (one process: all)."""
        if self.single_process:
            return None
        return {"num_replicas": self._num_nodes * self.num_processes, "rank": self.global_rank}

    def set_world_ranks(self) -> None:
        """Record this process's global rank and the world size on the cluster environment.

        Environments that know their ranks themselves (torchelastic, SLURM) ignore what is recorded.
        """
        environment = self._cluster_environment
        self._device_of_rank = None
        if environment is None:
            return
        check_process_variables()
        # The local rank is known from here on: the device lookup on every collective need not re-read it.
        if self._parallel_devices:
            local_rank, count = self.local_rank, len(self._parallel_devices)
            if not 0 <= local_rank < count:
                source = "" if "LOCAL_RANK" in os.environ else f" (from {type(environment).__name__})"
                raise InvalidConfigError(
                    f"LOCAL_RANK={local_rank}{source}, but this job has {count} device(s) on each node (local "
                    f"ranks 0 to {count - 1}). Set LOCAL_RANK below {count}, or ask for more devices.",
                    argument="LOCAL_RANK",
                    value=local_rank,
                )
            self._device_of_rank = self._parallel_devices[local_rank]
        environment.set_global_rank(self.node_rank * self.num_processes + self.local_rank)
        environment.set_world_size(self._num_nodes * self.num_processes)
        from fabric_core.utilities.rank_zero import rank_zero_only

        rank_zero_only.rank = environment.global_rank()

    def _set_world_ranks(self) -> None:
        """Lightning's name for :meth:`set_world_ranks` (its strategies define it; launched code calls it)."""
        self.set_world_ranks()

    def setup_environment(self) -> None:
        """Prepare the device, then join the process group (no-op if this process already has one, or is the
        only one)."""
        self.set_world_ranks()
        super().setup_environment()
        if not self.single_process:
            self.init_process_group()

    def init_process_group(self) -> None:
        """Create the default process group from the cluster environment's address, port and ranks.

        Raises:
            RuntimeError: ``torch.distributed`` is not available in this build of torch, or the strategy
                has no cluster environment.
        """
        if not dist.is_available():
            raise RuntimeError("`torch.distributed` is not available in this build of torch.")
        self._process_group_backend = backend = self._get_process_group_backend()
        if dist.is_initialized():
            return
        environment = self._cluster_environment
        if environment is None:
            raise RuntimeError(f"`{type(self).__name__}` needs a cluster environment to create a process group.")
        port_was_set = "MASTER_PORT" in os.environ
        address, port = environment.main_address, environment.main_port
        # An environment that had no port picked one just now, in this process: no other rank can know it.
        port_chosen_here = not port_was_set and "MASTER_PORT" in os.environ
        os.environ["MASTER_ADDR"] = address
        os.environ["MASTER_PORT"] = str(port)
        # Passed even when None, as Lightning does: tests that mock init_process_group expect the argument.
        kwargs: dict[str, Any] = {"device_id": self.root_device if self.root_device.type != "cpu" else None}
        rank, world_size = self.global_rank, self.world_size
        show_info_lines()
        _log.info(f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/{world_size}")
        rendezvous.init_process_group(
            backend,
            address=address,
            port=port,
            rank=rank,
            world_size=world_size,
            timeout=self._timeout,
            port_chosen_here=port_chosen_here,
            **kwargs,
        )
        rank_zero_info(
            f"{'-' * 100}\ndistributed_backend={backend}\n"
            f"All distributed processes registered. Starting with {world_size} processes\n{'-' * 100}\n"
        )
        self._device_for_collectives = self.root_device
        collective_check.configure()
        watchdog.start(self.global_rank, world_size)
        if not self._exit_hook_registered:
            # A process that exits with its process group alive can abort in gloo's destructors
            # ("terminate called without an active exception"); finished jobs must exit 0.
            exit_handshake.watch_uncaught_exceptions()
            atexit.register(self._close_at_exit)
            self._exit_hook_registered = True

    # -- collectives -------------------------------------------------------------------------------------
    def all_reduce(self, tensor: Tensor | Any, group: Any = None, reduce_op: Any = "mean") -> Tensor | Any:
        """Reduce every tensor in ``tensor`` across processes, in place (no barrier first).

        Args:
            tensor: A tensor, a Python number, or a collection of them; numbers become tensors on this
                process's device.
            group: The process group; ``None`` for all processes.
            reduce_op: ``"sum"``, ``"mean"`` (or ``"avg"``), ``"max"``, ``"min"``, ``"product"``, or a
                ``torch.distributed.ReduceOp``. The mean is a sum divided by the world size (gloo has no
                ``AVG``); integer and bool tensors keep their dtype, so their mean is truncated toward zero.

        Returns:
            The reduced tensors, in the structure passed.

        Raises:
            InvalidConfigError: An unknown ``reduce_op``.
            ValueError: On every rank alike, when the ranks pass tensors of different shapes or dtypes the
                first time this (shape, dtype, group) is reduced (instead of an abort in gloo).
        """
        # Inline, without helper calls: every microsecond before a small collective is paid again as the
        # other rank's wait (it is on the critical path of both).
        resolved = collectives.RESOLVED.get(reduce_op) if type(reduce_op) is str else None
        op, divide = resolved if resolved is not None else collectives.resolve_reduce_op(reduce_op)
        if not (_DIST_AVAILABLE and dist.is_initialized()):
            return tensor
        if isinstance(tensor, Tensor):
            return collectives.all_reduce(tensor, group, op, divide)
        data = convert_to_tensors(tensor, self._collective_device())
        return apply_to_collection(data, Tensor, collectives.all_reduce, group, op, divide)

    def all_gather(self, tensor: Tensor | Any, group: Any = None, sync_grads: bool = False) -> Tensor | Any:
        """Gather tensors from every process, stacked along a new first dimension of size ``world_size``.

        Args:
            tensor: A tensor or a collection of tensors; the result has the same structure.
            group: The process group; ``None`` for all processes.
            sync_grads: Let gradients flow back through the gathered tensors.

        Raises:
            ValueError: On every rank alike, when the ranks' shapes or dtypes differ (instead of a hang or
                an abort); the process group stays usable.
        """
        if not _distributed():
            return tensor
        device = self._collective_device()
        data = tensor if collectives.only_tensors(tensor) else convert_to_tensors(tensor, device)
        return collectives.all_gather(data, group, device, sync_grads=sync_grads)

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send any picklable object from global rank ``src`` to every process, and return it."""
        if not _distributed():
            return obj
        objects: list[Any] = [obj]
        dist.broadcast_object_list(objects, src=src)
        result: T = objects[0]
        return result

    def barrier(self, name: str | None = None, *args: Any, **kwargs: Any) -> None:
        """Wait until every process reaches this point; ranks at barriers of different names fail at once.

        The barrier is a small ``all_gather`` of a code of ``name``: when the codes differ, every rank raises
        :class:`~fabric_core.errors.CollectiveMismatchError` naming each rank's barrier and line, instead of
        passing each other (unnamed barriers agree with each other, as in Lightning). Extra arguments are
        accepted and ignored, as Lightning's strategies do.

        Raises:
            CollectiveMismatchError: The ranks reached barriers of different names.
        """
        if not _distributed():
            return
        collective_check.meet(name, self._collective_device())

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Combine one boolean per process: ``all`` of them, else any of them."""
        if not _distributed():
            return decision
        votes = torch.tensor(int(decision), device=self._collective_device())
        dist.all_reduce(votes, op=dist.ReduceOp.SUM)
        return bool(votes.item() == self.world_size) if all else bool(votes.item() > 0)

    def _collective_device(self) -> torch.device:
        # Fixed once the process group exists; reading it from the environment every call is measurable.
        if self._device_for_collectives is None:
            return self.root_device if self._parallel_devices else torch.device("cpu")
        return self._device_for_collectives

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent to a spawned process has no process group yet: it must register its own exit hook.
        state = self.__dict__.copy()
        state["_exit_hook_registered"] = False
        state["_device_for_collectives"] = None
        return state

    # -- teardown ----------------------------------------------------------------------------------------
    def release_modules(self) -> None:
        """Drop what keeps the process group referenced (wrapped modules); called before it is destroyed."""

    def teardown(self) -> None:
        """Release the modules, then meet the other ranks and destroy the process group.

        Must be called on every rank. The order (release, collect, barrier, destroy) is what keeps gloo
        from aborting the process at exit.
        """
        super().teardown()
        self._close_process_group(meet_peers=True)
        if self._cluster_environment is not None:
            self._cluster_environment.teardown()

    def _close_at_exit(self) -> None:
        if _distributed():
            # After an uncaught exception the other ranks may never arrive: the job ends without meeting them.
            self._close_process_group(meet_peers=not exit_handshake.failed())

    def _close_process_group(self, meet_peers: bool) -> None:
        """Release the modules, collect, optionally meet the peers, and destroy the process group.

        Tearing down gloo's connections while a peer still uses them aborts processes at exit about once in
        ten runs; meeting first (a barrier that gives up rather than hangs), none in dozens.
        """
        self.release_modules()
        gc.collect()
        if not _distributed():
            return
        if meet_peers:
            # Bounded by seconds, not by the collective timeout: a peer stuck in a collective would
            # otherwise hold this rank for the whole process-group timeout (30 min by default).
            exit_handshake.bounded_barrier(exit_handshake.exit_timeout())
        dist.destroy_process_group()
        watchdog.stop()


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
