"""The collective of a single process: every operation returns its input."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from fabric_core._deferred import lightning_reexports
from fabric_core.plugins.collectives.collective import Collective
from fabric_core.utilities.types import CollectibleGroup

__all__ = ["SingleDeviceCollective"]


class _SingleProcessGroup:
    """The group of one process (rank 0 of 1)."""

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


class SingleDeviceCollective(Collective):
    """Collective operations for a run of one process: reductions and gathers of one tensor are that tensor.

    Lets code written for :class:`~fabric_core.plugins.collectives.TorchCollective` run unchanged without
    a process group.
    """

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def broadcast(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def all_reduce(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def reduce(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def all_gather(self, tensor_list: list[Tensor], tensor: Tensor, **__: Any) -> list[Tensor]:
        return [tensor]

    def gather(self, tensor: Tensor, *_: Any, **__: Any) -> list[Tensor]:
        return [tensor]

    def scatter(self, tensor: Tensor, scatter_list: list[Tensor], *_: Any, **__: Any) -> Tensor:
        return scatter_list[0]

    def reduce_scatter(self, output: Tensor, input_list: list[Tensor], *_: Any, **__: Any) -> Tensor:
        return input_list[0]

    def all_to_all(
        self, output_tensor_list: list[Tensor], input_tensor_list: list[Tensor], *_: Any, **__: Any
    ) -> list[Tensor]:
        return input_tensor_list

    def send(self, *_: Any, **__: Any) -> None:
        pass

    def recv(self, tensor: Tensor, *_: Any, **__: Any) -> Tensor:
        return tensor

    def barrier(self, *_: Any, **__: Any) -> None:
        pass

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def is_initialized(cls) -> bool:
        return True  # there is nothing to initialise

    @classmethod
    def init_group(cls, **_: Any) -> None:
        pass

    @classmethod
    def new_group(cls, **_: Any) -> CollectibleGroup:
        return _SingleProcessGroup()

    @classmethod
    def destroy_group(cls, group: CollectibleGroup) -> None:
        pass

    @classmethod
    def _convert_to_native_op(cls, op: str) -> str:
        return op

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
