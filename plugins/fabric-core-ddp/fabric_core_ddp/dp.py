"""``torch.nn.DataParallel``: one process that splits each batch over its GPUs."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor
from torch.nn import DataParallel, Module

from fabric_core.strategies.parallel import ParallelStrategy

__all__ = ["DataParallelStrategy"]

T = TypeVar("T")


class DataParallelStrategy(ParallelStrategy):
    """Replicates the model on every device inside one process (``strategy="dp"``).

    There is one process, so no launcher and no process group: the ranks are 0, the world size is 1, and
    the collectives are the identity. ``fabric.no_backward_sync`` is not supported (DataParallel reduces
    gradients into the one model directly). Selection replaces ``dp`` by ``ddp`` on CPUs.
    """

    single_process: ClassVar[bool] = True

    @property
    def root_device(self) -> torch.device:
        """The first device: inputs go there and DataParallel scatters them."""
        if not self.parallel_devices:
            raise RuntimeError("`DataParallelStrategy` has no devices: pass `parallel_devices=[...]`.")
        return self.parallel_devices[0]

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def distributed_sampler_kwargs(self) -> None:  # type: ignore[override]
        """``None``: the one process reads the whole dataset."""
        return None

    def set_world_ranks(self) -> None:
        """Nothing to record: one process."""

    def setup_environment(self) -> None:
        """Prepare the first device; no process group."""
        assert self.accelerator is not None
        self.accelerator.setup_device(self.root_device)

    def setup_module(self, module: Module) -> DataParallel[Module]:
        """Wrap ``module`` in ``DataParallel`` over the parallel devices."""
        devices = self.parallel_devices or []
        device_ids = [d.index for d in devices if d.type != "cpu"] or None
        return DataParallel(module, device_ids=device_ids)

    def get_module_state_dict(self, module: Module) -> dict[str, Any]:
        if isinstance(module, DataParallel):
            module = module.module
        return module.state_dict()

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> None:
        if isinstance(module, DataParallel):
            module = module.module
        module.load_state_dict(state_dict, strict=strict)

    # Lightning's parameter name (`collection`), so that keyword calls work; one process: the identity.
    def all_reduce(self, collection: Tensor | Any, group: Any = None, reduce_op: Any = "mean") -> Tensor | Any:
        return collection

    def all_gather(self, tensor: Tensor | Any, group: Any = None, sync_grads: bool = False) -> Tensor | Any:
        return tensor

    def broadcast(self, obj: T, src: int = 0) -> T:
        return obj

    def barrier(self, name: str | None = None, *args: Any, **kwargs: Any) -> None:
        return None

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision
