"""``Fabric``'s methods that every process calls together: the collectives, and printing once per node.

They share one rule, checked at the top of each by ``_launched_strategy`` (inlined in ``all_reduce``, which
runs inside training steps): with several processes, ``launch()`` (or ``fabric-core run``) must have started
them first. Once launched the check is one attribute read.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Generator
from typing import Any

from torch import Tensor

from fabric_core._distributed import collective_check, flight_recorder
from fabric_core.strategies.strategy import Strategy
from fabric_core.utilities.apply_func import apply_to_collection, convert_to_tensors
from fabric_core.utilities.distributed import _InfiniteBarrier

__all__ = ["Collectives"]


class Collectives:
    """The collectives of :class:`~fabric_core.fabric.Fabric` (its base class; not used on its own)."""

    _strategy: Strategy
    #: Whether the processes exist (``launch()`` ran, or they were started outside).
    _launched: bool

    def _validate_launched(self) -> None:
        """Refuse a call that needs the processes before ``launch()`` started them.

        Raises:
            RuntimeError: Several processes are needed and none were launched.
        """
        # Read from the strategy's class, which declares it (and which `Mock(spec=DDPStrategy)` reports); an
        # object that is no strategy of ours needs launching, as in Lightning.
        if not self._launched and not getattr(self._strategy.__class__, "single_process", False):
            raise RuntimeError(
                "To use Fabric with more than one device, you must call `.launch()` or use the CLI:"
                " `fabric-core run --help`."
            )

    def _record(self, call: str, what: Any = None) -> None:
        """Keep this call in the flight recorder (for hang reports); with the collective check on, compare it
        with every rank's first."""
        flight_recorder.record(call, what)
        if collective_check.checking:
            collective_check.check_call(flight_recorder.last(), self._strategy)

    def _launched_strategy(self) -> Strategy:
        """The strategy, once :meth:`_validate_launched` passed: how every collective starts."""
        if not self._launched:
            self._validate_launched()
        return self._strategy

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the first process of each node only.

        The line reaches ``file`` in one write: the built-in ``print`` writes each argument, separator and the
        line end separately, so on an unbuffered stream another process's output could land mid-line.
        """
        if self._strategy.local_rank != 0:
            return
        file = kwargs.pop("file", None) or sys.stdout
        flush = kwargs.pop("flush", False)
        line = io.StringIO()
        print(*args, file=line, **kwargs)  # the built-in's own checks of ``sep`` and ``end``
        file.write(line.getvalue())
        if flush:
            file.flush()

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this call.

        Raises:
            RuntimeError: Several processes are needed and ``launch()`` has not started them.
        """
        strategy = self._launched_strategy()
        self._record("barrier", None if name is None else repr(name))
        strategy.barrier(name=name)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send any picklable object from process ``src`` to all; every process returns it.

        Raises:
            RuntimeError: Several processes are needed and ``launch()`` has not started them.
        """
        strategy = self._launched_strategy()
        self._record("broadcast", f"src={src}")
        return strategy.broadcast(obj, src=src)

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Gather tensors (numbers become tensors) of every process: shape ``(world_size, *shape)``.

        With one process no dimension is added. Nested collections are gathered element by element.

        Args:
            data: A tensor, a number or a nested collection of them.
            group: The process group; all processes by default.
            sync_grads: Let gradients flow back through the gather.

        Raises:
            RuntimeError: Several processes are needed and ``launch()`` has not started them.
        """
        strategy = self._launched_strategy()
        self._record("all_gather", flight_recorder.tensor_summary(data))
        if isinstance(data, Tensor) and data.device == strategy.root_device:  # nothing to convert or walk
            return strategy.all_gather(data, group=group, sync_grads=sync_grads)
        data = convert_to_tensors(data, device=strategy.root_device)
        if strategy.gathers_collections:
            # One call for the whole collection: the strategy packs it into one collective, not one per tensor.
            return strategy.all_gather(data, group=group, sync_grads=sync_grads)
        return apply_to_collection(data, Tensor, strategy.all_gather, group=group, sync_grads=sync_grads)

    def all_reduce(self, data: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Reduce tensors (numbers become tensors) across processes, in place; nested collections too.

        Args:
            data: A tensor, a number or a nested collection of them.
            group: The process group; all processes by default.
            reduce_op: ``"mean"``, ``"sum"``, ``"max"``, ``"min"``, ... or a ``torch.distributed.ReduceOp``.

        Raises:
            RuntimeError: Several processes are needed and ``launch()`` has not started them.
        """
        if not self._launched:  # `_launched_strategy`, inlined: a metric's all_reduce runs every step
            self._validate_launched()
        # `_record`, inlined: the recorder is on the path of every metric's reduction.
        flight_recorder.record(
            "all_reduce", (data.dtype, data.shape) if isinstance(data, Tensor) else type(data).__name__
        )
        if collective_check.checking:
            collective_check.check_call(flight_recorder.last(), self._strategy)
        strategy = self._strategy
        if isinstance(data, Tensor) and data.device == strategy.root_device:  # nothing to convert or walk
            return strategy.all_reduce(data, group=group, reduce_op=reduce_op)
        data = convert_to_tensors(data, device=strategy.root_device)
        return apply_to_collection(data, Tensor, strategy.all_reduce, group=group, reduce_op=reduce_op)

    @contextlib.contextmanager
    def rank_zero_first(self, local: bool = False) -> Generator[None, None, None]:
        """Run the block on rank 0 first; the other processes run it once rank 0 is done.

        The waits are calls of Lightning's ``utilities.distributed._InfiniteBarrier``, which never times out:
        rank 0 may download data for hours.

        Args:
            local: Let local rank 0 of each node go first (for data on disks that nodes do not share).
        """
        rank = self._strategy.local_rank if local else self._strategy.global_rank
        with _InfiniteBarrier() as barrier:
            if rank > 0:
                barrier()
            yield
            if rank == 0:
                barrier()
