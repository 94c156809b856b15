"""Collective operations through ``torch.distributed`` on a group the user creates."""

from __future__ import annotations

import datetime
import os
from typing import Any, ClassVar, Self

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.constants import default_pg_timeout

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import InvalidConfigError
from fabric_core.plugins.collectives.collective import Collective
from fabric_core.utilities.types import CollectibleGroup, RedOpType, ReduceOp

__all__ = ["TorchCollective", "default_pg_timeout"]

_Op = str | ReduceOp | RedOpType


class TorchCollective(Collective):
    """Collective operations with ``torch.distributed`` on this object's group (the default group of all
    processes until :meth:`create_group` makes one of its own).

    Example (every process runs it)::

        collective = TorchCollective().setup(backend="gloo", main_address="127.0.0.1", main_port="29500",
                                             world_size=4, rank=rank)
        trainers = TorchCollective().create_group(ranks=[1, 2, 3])
        collective.broadcast(weights, src=1)
        ...
        trainers.teardown()
        collective.teardown()  # also destroys the default group, once no other group is left

    Raises:
        RuntimeError: ``torch.distributed`` is not available in this build of torch.
    """

    #: Whether a ``TorchCollective.setup`` created the default group (and a teardown may destroy it).
    manages_default_group: ClassVar[bool] = False
    addr_key: ClassVar[str] = "MASTER_ADDR"
    port_key: ClassVar[str] = "MASTER_PORT"

    def __init__(self) -> None:
        if not dist.is_available():
            raise RuntimeError("Torch distributed is not available.")
        super().__init__()

    @property
    def group(self) -> CollectibleGroup:
        """The group this collective owns: the default group unless :meth:`create_group` made another."""
        if self._group is None:
            self._group = dist.GroupMember.WORLD
        return super().group

    @property
    def rank(self) -> int:
        """This process's rank within the group."""
        return dist.get_rank(self.group)  # type: ignore[arg-type]

    @property
    def world_size(self) -> int:
        return dist.get_world_size(self.group)  # type: ignore[arg-type]

    def broadcast(self, tensor: Tensor, src: int) -> Tensor:
        dist.broadcast(tensor, src, group=self.group)  # type: ignore[arg-type]
        return tensor

    def all_reduce(self, tensor: Tensor, op: _Op = "sum") -> Tensor:
        dist.all_reduce(tensor, op=self._convert_to_native_op(op), group=self.group)
        return tensor

    def reduce(self, tensor: Tensor, dst: int, op: _Op = "sum") -> Tensor:
        dist.reduce(tensor, dst, op=self._convert_to_native_op(op), group=self.group)  # type: ignore[arg-type]
        return tensor

    def all_gather(self, tensor_list: list[Tensor], tensor: Tensor) -> list[Tensor]:
        dist.all_gather(tensor_list, tensor, group=self.group)
        return tensor_list

    def gather(self, tensor: Tensor, gather_list: list[Tensor], dst: int = 0) -> list[Tensor]:
        dist.gather(tensor, gather_list, dst, group=self.group)  # type: ignore[arg-type]
        return gather_list

    def scatter(self, tensor: Tensor, scatter_list: list[Tensor], src: int = 0) -> Tensor:
        dist.scatter(tensor, scatter_list, src, group=self.group)  # type: ignore[arg-type]
        return tensor

    def reduce_scatter(self, output: Tensor, input_list: list[Tensor], op: _Op = "sum") -> Tensor:
        dist.reduce_scatter(output, input_list, op=self._convert_to_native_op(op), group=self.group)
        return output

    def all_to_all(self, output_tensor_list: list[Tensor], input_tensor_list: list[Tensor]) -> list[Tensor]:
        dist.all_to_all(output_tensor_list, input_tensor_list, group=self.group)
        return output_tensor_list

    def send(self, tensor: Tensor, dst: int, tag: int = 0) -> None:
        dist.send(tensor, dst, tag=tag, group=self.group)  # type: ignore[arg-type]

    def recv(self, tensor: Tensor, src: int | None = None, tag: int = 0) -> Tensor:
        dist.recv(tensor, src, tag=tag, group=self.group)  # type: ignore[arg-type]
        return tensor

    def all_gather_object(self, object_list: list[Any], obj: Any) -> list[Any]:
        dist.all_gather_object(object_list, obj, group=self.group)
        return object_list

    def broadcast_object_list(self, object_list: list[Any], src: int, device: torch.device | None = None) -> list[Any]:
        dist.broadcast_object_list(object_list, src, group=self.group, device=device)  # type: ignore[arg-type]
        return object_list

    def gather_object(self, obj: Any, object_gather_list: list[Any], dst: int = 0) -> list[Any]:
        dist.gather_object(obj, object_gather_list, dst, group=self.group)  # type: ignore[arg-type]
        return object_gather_list

    def scatter_object_list(
        self, scatter_object_output_list: list[Any], scatter_object_input_list: list[Any], src: int = 0
    ) -> list[Any]:
        dist.scatter_object_list(
            scatter_object_output_list,
            scatter_object_input_list,
            src,
            group=self.group,  # type: ignore[arg-type]
        )
        return scatter_object_output_list

    def barrier(self, device_ids: list[int] | None = None) -> None:
        """Wait for every process of the group; a process outside the group returns at once."""
        if self.group == dist.GroupMember.NON_GROUP_MEMBER:  # type: ignore[comparison-overlap]
            return
        dist.barrier(group=self.group, device_ids=device_ids)  # type: ignore[arg-type]

    def monitored_barrier(self, timeout: datetime.timedelta | None = None, wait_all_ranks: bool = False) -> None:
        """A barrier that names the ranks that did not arrive within ``timeout`` (gloo only)."""
        dist.monitored_barrier(group=self.group, timeout=timeout, wait_all_ranks=wait_all_ranks)  # type: ignore[arg-type]

    def setup(self, main_address: str | None = None, main_port: str | None = None, **kwargs: Any) -> Self:
        """Create the default group with ``init_process_group(**kwargs)`` unless it exists.

        Args:
            main_address: The rendezvous host, used when ``MASTER_ADDR`` is not set (and only for this call).
            main_port: The rendezvous port, used when ``MASTER_PORT`` is not set (and only for this call).
            **kwargs: Passed to ``torch.distributed.init_process_group`` (``backend``, ``world_size``,
                ``rank``, ``timeout``, ...).
        """
        if self.is_initialized():
            return self
        added = []
        for key, value in ((self.addr_key, main_address), (self.port_key, main_port)):
            if value is not None and key not in os.environ:
                os.environ[key] = str(value)
                added.append(key)
        try:
            super().setup(**kwargs)
        finally:
            for key in added:  # the address is this call's, not the process's from now on
                os.environ.pop(key, None)
        TorchCollective.manages_default_group = True
        return self

    def teardown(self) -> Self:
        """Destroy this collective's group, and the default group too if ``setup`` created it and no other
        group is left."""
        member = self.group != dist.GroupMember.NON_GROUP_MEMBER  # type: ignore[comparison-overlap]
        super().teardown()
        world = dist.GroupMember.WORLD
        if world is None:  # destroyed already, by someone else
            TorchCollective.manages_default_group = False
        elif member and TorchCollective.manages_default_group and len(dist.distributed_c10d._pg_map) == 1:
            self.destroy_group(world)
            TorchCollective.manages_default_group = False
        return self

    @classmethod
    def is_available(cls) -> bool:
        return dist.is_available()

    @classmethod
    def is_initialized(cls) -> bool:
        return cls.is_available() and dist.is_initialized()

    @classmethod
    def init_group(cls, **kwargs: Any) -> None:
        dist.init_process_group(**kwargs)

    @classmethod
    def new_group(cls, **kwargs: Any) -> CollectibleGroup:
        """A new group (``torch.distributed.new_group(**kwargs)``); every process of the default group calls it."""
        group: CollectibleGroup = dist.new_group(**kwargs)
        return group

    @classmethod
    def destroy_group(cls, group: CollectibleGroup) -> None:
        # A process outside the group holds a placeholder that torch never registered: nothing to destroy.
        if group in dist.distributed_c10d._pg_map:
            dist.destroy_process_group(group)

    @classmethod
    def _convert_to_native_op(cls, op: _Op) -> ReduceOp | RedOpType:
        if isinstance(op, ReduceOp | RedOpType):
            return op
        if not isinstance(op, str):
            raise InvalidConfigError(
                f"Unsupported op {op!r} of type {type(op).__name__}: pass a name such as 'sum' or a `ReduceOp`.",
                argument="op",
                value=op,
            )
        native = getattr(ReduceOp, op.upper(), None)
        if not isinstance(native, RedOpType):
            choices = sorted(name.lower() for name in RedOpType.__members__)
            raise InvalidConfigError(
                f"op {op.upper()!r} is not a member of `ReduceOp`: expected one of {', '.join(choices)}.",
                argument="op",
                value=op,
            )
        return native

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
