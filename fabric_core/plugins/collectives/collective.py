"""The interface of a collective: a set of processes that exchange tensors, owning one process group."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self

from torch import Tensor

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import FabricCoreError
from fabric_core.utilities.types import CollectibleGroup

__all__ = ["CollectibleGroup", "Collective", "GroupOwnershipError"]


class GroupOwnershipError(FabricCoreError, RuntimeError):
    """A collective was asked for a group it does not own, or to create one while it owns one already."""


class Collective(ABC):
    """Collective operations among processes, on the group this object owns.

    The usual life: ``setup()`` joins (or creates) the default group of all processes, ``create_group()``
    makes this object's own subgroup, the operations run on it, and ``teardown()`` destroys it. Use it for
    communication outside the strategy's, e.g. between a "player" and a "trainer" group in reinforcement
    learning.
    """

    def __init__(self) -> None:
        self._group: CollectibleGroup | None = None

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank in the group."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """Number of processes in the group."""

    @property
    def group(self) -> CollectibleGroup:
        """The group this collective owns.

        Raises:
            GroupOwnershipError: It owns none (also a ``RuntimeError``).
        """
        if self._group is None:
            raise GroupOwnershipError(
                f"`{type(self).__name__}` does not own a group. HINT: try `collective.create_group().group`"
            )
        return self._group

    @abstractmethod
    def broadcast(self, tensor: Tensor, src: int) -> Tensor: ...

    @abstractmethod
    def all_reduce(self, tensor: Tensor, op: str) -> Tensor: ...

    @abstractmethod
    def reduce(self, tensor: Tensor, dst: int, op: str) -> Tensor: ...

    @abstractmethod
    def all_gather(self, tensor_list: list[Tensor], tensor: Tensor) -> list[Tensor]: ...

    @abstractmethod
    def gather(self, tensor: Tensor, gather_list: list[Tensor], dst: int = 0) -> list[Tensor]: ...

    @abstractmethod
    def scatter(self, tensor: Tensor, scatter_list: list[Tensor], src: int = 0) -> Tensor: ...

    @abstractmethod
    def reduce_scatter(self, output: Tensor, input_list: list[Tensor], op: str) -> Tensor: ...

    @abstractmethod
    def all_to_all(self, output_tensor_list: list[Tensor], input_tensor_list: list[Tensor]) -> list[Tensor]: ...

    @abstractmethod
    def send(self, tensor: Tensor, dst: int, tag: int = 0) -> None: ...

    @abstractmethod
    def recv(self, tensor: Tensor, src: int | None = None, tag: int = 0) -> Tensor: ...

    @abstractmethod
    def barrier(self, device_ids: list[int] | None = None) -> None: ...

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool: ...

    @classmethod
    @abstractmethod
    def is_initialized(cls) -> bool: ...

    @classmethod
    @abstractmethod
    def init_group(cls, **kwargs: Any) -> None: ...

    @classmethod
    @abstractmethod
    def new_group(cls, **kwargs: Any) -> CollectibleGroup: ...

    @classmethod
    @abstractmethod
    def destroy_group(cls, group: CollectibleGroup) -> None: ...

    @classmethod
    @abstractmethod
    def _convert_to_native_op(cls, op: str) -> Any: ...

    def setup(self, **kwargs: Any) -> Self:
        """Create the default group (``init_group(**kwargs)``) unless it exists already."""
        if not self.is_initialized():
            self.init_group(**kwargs)
        return self

    def create_group(self, **kwargs: Any) -> Self:
        """Create this collective's own group with ``new_group(**kwargs)``; the default group must exist.

        Raises:
            GroupOwnershipError: It owns a group already.
        """
        if self._group is not None:
            raise GroupOwnershipError(f"`{type(self).__name__}` already owns a group.")
        self._group = self.new_group(**kwargs)
        return self

    def teardown(self) -> Self:
        """Destroy the group this collective owns.

        Raises:
            GroupOwnershipError: It owns none.
        """
        if self._group is None:
            raise GroupOwnershipError(f"`{type(self).__name__}` does not own a group to destroy.")
        self.destroy_group(self._group)
        self._group = None
        return self

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
