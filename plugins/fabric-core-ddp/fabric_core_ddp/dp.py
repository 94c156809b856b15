"""``torch.nn.DataParallel``: one process that splits each batch over its GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor
from torch.nn import DataParallel, Module

from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.strategies.wiring import DEVICES_WIRING_ORDER, ParallelWiring, wired

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DataParallelStrategy"]


class DataParallelStrategy(ParallelStrategy):
    """Replicates the model on every device inside one process (``strategy="dp"``).

    There is one process (``single_process``), so no launcher and no process group: the ranks are 0, the world
    size is 1, the first device is the root device, and the collectives are the identity.
    ``fabric.no_backward_sync`` is not supported (DataParallel reduces gradients into the one model directly).
    Selection replaces ``dp`` by ``ddp`` on CPUs.
    """

    single_process: ClassVar[bool] = True

    @wired(ParallelWiring, positional=DEVICES_WIRING_ORDER)
    def __init__(self, **wiring: Unpack[ParallelWiring]) -> None:
        super().__init__(**wiring)

    def setup_module(self, module: Module) -> DataParallel[Module]:
        """Wrap ``module`` in ``DataParallel`` over the parallel devices."""
        devices: list[Any] = self.parallel_devices or []
        # Device indices given as numbers (as DataParallel takes them) pass through, as in Lightning.
        device_ids = [d if isinstance(d, int) else d.index for d in devices if isinstance(d, int) or d.type != "cpu"]
        return DataParallel(module=module, device_ids=device_ids or None)  # by keyword, as Lightning passes it

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
