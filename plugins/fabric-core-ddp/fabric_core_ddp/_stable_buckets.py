"""DDP's first backward adds the gradients in the order of every later one, so a resumed run is bit-identical.

``DistributedDataParallel`` reduces its first synchronised backward in one bucket laid out in parameter
order, then rebuilds its buckets in the order the gradients arrived (a 1 MiB first bucket, 25 MiB after).
The bucket layout decides which element of the flat buffer lands in which chunk of the ring all-reduce, and
so in which order the processes' values are added. With two processes the order cannot matter (``a + b``
is ``b + a``); with three or more it does, so a run resumed from a checkpoint, whose new DDP object runs one
backward in the parameter-order layout, drifts in the last bits from the uninterrupted run, which ran that
step in the rebuilt layout.

:func:`install` makes the first backward reduce exactly as the rebuilt buckets will: it records the order in
which gradients arrive, splits the first bucket into the buckets DDP is about to build from that order, and
all-reduces each one as its own flat tensor. From the second backward on, each bucket is scaled and
all-reduced as DDP does by itself. The hook is put in place at the first forward, so a communication hook of
the user's (``register_comm_hook`` after ``fabric.setup``) takes precedence; DDP's own layouts are left
unchanged.
"""

# No `from __future__ import annotations`: DDP compares the hook's annotations with the real types.

import itertools
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import GradBucket, _compute_bucket_assignment_by_size
from torch.nn.parallel import DistributedDataParallel

__all__ = ["install"]


def needed(wrapped: DistributedDataParallel) -> bool:
    """Whether ``wrapped`` changes its bucket layout after the first backward in a way the sum order sees."""
    return (
        dist.get_world_size(wrapped.process_group) > 2
        and not wrapped.find_unused_parameters  # with it DDP never rebuilds its buckets
        and not wrapped.bucket_bytes_cap_list  # explicit per-bucket caps: the rebuild uses those; not modelled
        and wrapped.mixed_precision is None
        and not getattr(wrapped, "_use_python_reducer", False)
        and not any(getattr(m, "sparse", False) for m in wrapped.module.modules())
    )


def install(wrapped: DistributedDataParallel) -> None:
    """Reduce the first backward of ``wrapped`` in the layout of its rebuilt buckets (when it matters).

    Only a ``DistributedDataParallel`` has the reducer this relies on: an object standing in for one (a test's
    mock of the class) is left as it is.
    """
    if isinstance(wrapped, DistributedDataParallel) and needed(wrapped):
        _FirstBackwardInRebuiltLayout(wrapped)


class _FirstBackwardInRebuiltLayout:
    """The communication hook's state: the arrival order of the gradients, and the DDP object it serves."""

    def __init__(self, wrapped: DistributedDataParallel) -> None:
        self._ddp = weakref.ref(wrapped)
        self._group = wrapped.process_group
        self._scale = 1.0 / dist.get_world_size(wrapped.process_group)
        self._bucket_caps = [wrapped._bucket_config.first_bucket_bytes_cap, wrapped.bucket_bytes_cap]
        self._arrival: dict[torch.Tensor, int] = {}
        self._counter = itertools.count()
        self._recorders: list[Any] = []
        # The rebuilt layout this hook used for the first backward: lists of parameters (for tests).
        self.first_layout: list[list[torch.Tensor]] = []
        self._pending = wrapped.register_forward_pre_hook(self._at_first_forward)

    def _at_first_forward(self, wrapped: DistributedDataParallel, _args: Any) -> None:
        self._pending.remove()
        if wrapped._get_ddp_logging_data().get("comm_hook"):  # type: ignore[no-untyped-call]
            return  # the user registered a hook of their own after setup: it decides how to reduce
        wrapped.register_comm_hook(self, _hook)
        for param in wrapped._module_parameters:
            if param.requires_grad:
                self._recorders.append(param.register_post_accumulate_grad_hook(self._arrived))

    def _arrived(self, param: torch.Tensor) -> None:
        # The latest backward's order: each backward overwrites every parameter's place.
        self._arrival[param] = next(self._counter)

    def first_backward(self, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
        """All-reduce ``bucket`` as the buckets DDP will build from this backward's arrival order."""
        views = dict(zip(bucket.parameters(), bucket.gradients(), strict=True))
        arrived = sorted(views, key=self._arrival.__getitem__)
        layout, _ = _compute_bucket_assignment_by_size(
            arrived, self._bucket_caps, [False] * len(arrived), list(range(len(arrived)))
        )
        groups = [[arrived[i] for i in indices] for indices in layout]
        self.first_layout.extend(groups)
        flats = [torch.cat([views[p].reshape(-1) for p in group]).mul_(self._scale) for group in groups]
        works = [dist.all_reduce(flat, group=self._group, async_op=True).get_future() for flat in flats]

        def copy_back(_: Any) -> torch.Tensor:
            for group, flat in zip(groups, flats, strict=True):
                offset = 0
                for param in group:
                    view = views[param]
                    view.copy_(flat[offset : offset + view.numel()].view_as(view))
                    offset += view.numel()
            return bucket.buffer()

        done: torch.futures.Future[torch.Tensor] = torch.futures.collect_all(works).then(copy_back)
        return done

    def done_recording(self) -> None:
        for handle in self._recorders:
            handle.remove()
        self._recorders.clear()
        self._arrival.clear()


def _hook(state: _FirstBackwardInRebuiltLayout, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
    wrapped = state._ddp()
    if wrapped is not None and not wrapped._has_rebuilt_buckets:
        return state.first_backward(bucket)
    state.done_recording()
    # What DDP does without a hook: scale by 1 / world size, then sum.
    buffer = bucket.buffer().mul_(state._scale)
    work = dist.all_reduce(buffer, group=state._group, async_op=True)
    reduced: torch.futures.Future[torch.Tensor] = work.get_future().then(lambda fut: fut.value()[0])
    return reduced
