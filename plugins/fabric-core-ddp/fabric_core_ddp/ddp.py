"""Distributed data parallel: one process per device, gradients averaged during backward."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import torch
from torch.nn import Module
from torch.nn.parallel import DistributedDataParallel

from fabric_core.errors import InvalidConfigError
from fabric_core.strategies.parallel import ParallelStrategy, check_forwarded_options
from fabric_core.strategies.strategy import BackwardSyncControl
from fabric_core.strategies.wiring import PARALLEL_WIRING_ORDER, ParallelWiring, split_wiring, wired
from fabric_core_ddp import _stable_buckets

__all__ = ["DDPStrategy"]


class DDPStrategy(ParallelStrategy):
    """Wraps the model in ``torch.nn.parallel.DistributedDataParallel``.

    DDP broadcasts rank 0's parameters and buffers when the model is set up, and averages gradients
    across processes during ``backward``. ``fabric.no_backward_sync(model)`` skips that averaging (for
    gradient accumulation); the next synchronised backward catches up.

    Args:
        **ddp_kwargs: The wiring of every parallel strategy (``accelerator``, ``parallel_devices``, ...,
            ``timeout``; see :class:`~fabric_core.strategies.parallel.ParallelStrategy`), with ``start_method``
            ``"popen"`` (run the script again per device: ``ddp``, the default), ``"spawn"`` (``ddp_spawn``),
            ``"fork"`` (``ddp_fork``, ``ddp_notebook``) or ``"forkserver"``; the other keywords are passed to
            ``DistributedDataParallel``: ``find_unused_parameters``, ``static_graph``,
            ``gradient_as_bucket_view``, ``bucket_cap_mb``, ``broadcast_buffers``, ...

    Raises:
        InvalidConfigError: An unknown ``start_method``, or ``device_ids`` among ``ddp_kwargs`` (the
            strategy sets it from the process's device).
        UnknownOptionError: A keyword argument that ``DistributedDataParallel`` does not take either.
    """

    @wired(ParallelWiring, positional=PARALLEL_WIRING_ORDER, start_method="popen")
    def __init__(self, **ddp_kwargs: Any) -> None:
        wiring, ddp_kwargs = split_wiring(ddp_kwargs)
        super().__init__(**wiring)
        for reserved in ("device_ids", "output_device"):
            if reserved in ddp_kwargs:
                raise InvalidConfigError(
                    f"`DDPStrategy({reserved}=...)`: the strategy sets `{reserved}` from each process's device; "
                    "choose the devices with `Fabric(devices=...)` instead.",
                    argument=reserved,
                    value=ddp_kwargs[reserved],
                )
        check_forwarded_options(
            type(self), ddp_kwargs, DistributedDataParallel, reserved=("device_ids", "output_device")
        )
        self._ddp_kwargs = ddp_kwargs
        self._backward_sync_control = DDPBackwardSyncControl()
        self._wrapped: list[weakref.ReferenceType[DistributedDataParallel]] = []

    @property
    def ddp_kwargs(self) -> dict[str, Any]:
        """The keyword arguments given to ``DistributedDataParallel``."""
        return dict(self._ddp_kwargs)

    def setup_module(self, module: Module) -> DistributedDataParallel:
        """Wrap ``module`` (already on this process's device); rank 0's weights are broadcast here.

        On a GPU the wrapper is built on a side CUDA stream, as Lightning builds it (PyTorch's CUDA notes on
        DDP and streams).
        """
        device_ids = None if self.root_device.type == "cpu" else [self.root_device.index]
        on_gpu = self.root_device.type == "cuda"
        side_stream = torch.cuda.stream(torch.cuda.Stream()) if on_gpu else None  # type: ignore[no-untyped-call]
        with side_stream or contextlib.nullcontext():
            wrapped = DistributedDataParallel(module=module, device_ids=device_ids, **self._ddp_kwargs)
        _stable_buckets.install(wrapped)  # resuming from a checkpoint adds the gradients in the same order
        self._wrapped.append(weakref.ref(wrapped))
        return wrapped

    def get_module_state_dict(self, module: Module) -> dict[str, Any]:
        """The state dict of the module inside the DDP wrapper, without a ``module.`` prefix."""
        if isinstance(module, DistributedDataParallel):
            module = module.module
        return module.state_dict()

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> None:
        if isinstance(module, DistributedDataParallel):
            module = module.module
        module.load_state_dict(state_dict, strict=strict)

    def release_modules(self) -> None:
        """Drop each DDP wrapper's reducer, which holds the process group alive past its destruction."""
        for ref in self._wrapped:
            wrapped = ref()
            if wrapped is not None:
                _release(wrapped)
        self._wrapped.clear()

    def __getstate__(self) -> dict[str, Any]:
        # Weak references cannot be pickled (spawn pickles the strategy); the workers wrap their own models.
        state = super().__getstate__()
        state["_wrapped"] = []
        return state


def _release(wrapped: DistributedDataParallel) -> None:
    for name in ("logger", "reducer"):
        if name in wrapped.__dict__:
            delattr(wrapped, name)


class DDPBackwardSyncControl(BackwardSyncControl):
    """``fabric.no_backward_sync(model)`` for DDP: its ``no_sync()`` context."""

    def no_backward_sync(self, module: Module, enabled: bool) -> contextlib.AbstractContextManager[Any]:
        """Skip gradient synchronisation of ``module`` inside the block when ``enabled``.

        Raises:
            TypeError: ``module`` is not wrapped in ``DistributedDataParallel`` (not set up by Fabric).
        """
        return self.wrapper_no_sync(module, enabled, DistributedDataParallel)


# Lightning's private names at `strategies.ddp`: the strategy names that start processes by forking, and the
# backward-sync control.
_DDP_FORK_ALIASES = ("ddp_fork", "ddp_notebook")
_DDPBackwardSyncControl = DDPBackwardSyncControl
