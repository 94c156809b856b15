"""Data parallel training on every XLA device of the host, one process per device."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import torch
from torch import Tensor
from torch.nn import Module

from fabric_core.errors import ArgumentTypeError, InvalidConfigError
from fabric_core.io.checkpoint_io import CheckpointIO
from fabric_core.precision.precision import Precision
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.strategies.strategy import Strategy
from fabric_core.strategies.wiring import DEVICES_WIRING_ORDER, DevicesWiring, wired
from fabric_core.utilities.apply_func import apply_to_collection, convert_to_tensors
from fabric_core.utilities.rank_zero import rank_zero_only
from fabric_core.utilities.types import PathLike, StateFilter
from fabric_core_xla import device, environment
from fabric_core_xla.checkpoint_io import XLACheckpointIO
from fabric_core_xla.environment import XLAEnvironment
from fabric_core_xla.launcher import XLALauncher
from fabric_core_xla.precision import XLAPrecision

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["XLAStrategy"]

T = TypeVar("T")
_REDUCE_OPS = ("sum", "mean", "avg")


class XLAStrategy(ParallelStrategy):
    """One process per XLA device (``Fabric(accelerator="tpu", strategy="xla")``), started by ``xmp.spawn``.

    Gradients are averaged across processes in the optimizer step (``xm.optimizer_step``), so there is no
    module wrapper and no ``no_backward_sync``. Ranks exist only inside the launched processes: before
    ``fabric.launch(fn)``, ranks read 0 and the world size 1, and touching the device is an error, because
    starting the XLA runtime in the parent would keep torch_xla from spawning.

    Args:
        sync_module_states: Copy rank 0's parameters and buffers to every process at ``setup``.
        **wiring: ``accelerator``, ``parallel_devices`` (one device per process), ``checkpoint_io``
            (:class:`XLACheckpointIO` by default) and ``precision`` (:class:`XLAPrecision` ``"32-true"`` by
            default); usually filled in by selection.

    Raises:
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    backward_sync_is_noop: ClassVar[bool] = True  # the optimizer step reduces the gradients

    @wired(
        DevicesWiring,
        positional=(*DEVICES_WIRING_ORDER, "sync_module_states"),
    )
    def __init__(self, sync_module_states: bool = True, **wiring: Unpack[DevicesWiring]) -> None:
        # Lightning's path of this module has no flag of its own: the strategy needs what its environment needs.
        device.require_torch_xla(type(self).__name__, environment._XLA_AVAILABLE)
        _check_precision(wiring.get("precision"))
        # torch_xla's runtime places the processes and joins them: neither is the user's to choose.
        super().__init__(cluster_environment=XLAEnvironment(), process_group_backend="xla", **wiring)
        self._launched = False
        self._sync_module_states = sync_module_states

    # -- wiring ------------------------------------------------------------------------------------------
    def default_checkpoint_io(self) -> CheckpointIO:
        """XLA tensors are saved through ``XLACheckpointIO`` (moved to the CPU, written by rank 0)."""
        return XLACheckpointIO()

    def default_precision(self) -> Precision:
        """The XLA precision plugin in full precision."""
        return XLAPrecision("32-true")

    @property
    def precision(self) -> Precision:
        return super().precision

    @precision.setter
    def precision(self, precision: Precision | None) -> None:
        _check_precision(precision)
        self._precision = precision

    def configure_launcher(self) -> None:
        self._launcher = XLALauncher(self)

    # -- topology ----------------------------------------------------------------------------------------
    @property
    def root_device(self) -> torch.device:
        """This process's XLA device.

        Raises:
            RuntimeError: Before the processes are launched.
        """
        if not self._launched:
            raise RuntimeError(
                f"`{type(self).__name__}` cannot touch the XLA device before the processes are launched: call "
                "`fabric.launch(fn)` and use the device inside `fn`."
            )
        return device.current_device()

    @property
    def global_rank(self) -> int:
        return super().global_rank if self._launched else 0

    @property
    def local_rank(self) -> int:
        return super().local_rank if self._launched else 0

    @property
    def node_rank(self) -> int:
        return super().node_rank if self._launched else 0

    @property
    def world_size(self) -> int:
        return super().world_size if self._launched else 1

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        """Each process reads the shard of its rank among all processes of all hosts."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def set_world_ranks(self) -> None:
        """The XLA runtime assigns the ranks; only tell ``rank_zero_only``, once they exist."""
        if self._launched:
            rank_zero_only.rank = self.global_rank

    def setup_environment(self) -> None:
        """Mark this process as launched and prepare its device (XLA needs no process group).

        Raises:
            InvalidConfigError: Only one device: use ``strategy="single_xla"``.
        """
        if self.num_processes == 1:
            raise InvalidConfigError(
                f"`{type(self).__name__}` runs one process per device and needs more than one; for a single "
                "device use `Fabric(strategy='single_xla')` (what `strategy='auto'` picks).",
                argument="strategy",
                value="xla",
            )
        self._launched = True
        self.set_world_ranks()
        Strategy.setup_environment(self)

    # -- modules -----------------------------------------------------------------------------------------
    def setup_module(self, module: Module) -> Module:
        """Give every process rank 0's parameters and buffers (unless ``sync_module_states=False``)."""
        if self._sync_module_states:
            import torch_xla.core.xla_model as xm

            xm.broadcast_master_param(module)
        return module

    def process_dataloader(self, dataloader: Any) -> Any:
        """Wrap a loader so batches are moved to the device ahead of time, each ending an XLA step."""
        from torch_xla.distributed.parallel_loader import MpDeviceLoader

        if isinstance(dataloader, MpDeviceLoader):
            return dataloader
        loader = MpDeviceLoader(dataloader, self.root_device)
        # Code that looks at `loader.dataset` / `loader.batch_sampler` keeps working.
        loader.dataset = dataloader.dataset
        loader.batch_sampler = getattr(dataloader, "batch_sampler", None)
        return loader

    # -- collectives -------------------------------------------------------------------------------------
    def all_gather(self, tensor: Tensor | Any, group: Any = None, sync_grads: bool = False) -> Tensor | Any:
        """Gather tensors from every process, stacked along a new first dimension of size ``world_size``.

        Args:
            tensor: A tensor or a collection of tensors (every process passes the same shapes).
            group: Not supported by XLA; must be ``None``.
            sync_grads: Let gradients flow back through the gathered tensors.
        """
        if not self._launched:
            return tensor
        _no_group(group, "all_gather")
        return apply_to_collection(tensor, Tensor, self._all_gather_one, sync_grads)

    def _all_gather_one(self, tensor: Tensor, sync_grads: bool) -> Tensor:
        import torch_xla.core.functions as xf
        import torch_xla.core.xla_model as xm

        shape, original = tensor.shape, tensor.device
        flat = tensor.reshape(1, *shape) if tensor.dim() == 0 else tensor
        flat = flat.to(self.root_device)
        gathered: Tensor = xf.all_gather(flat) if sync_grads else xm.all_gather(flat)
        return gathered.reshape(self.world_size, *shape).to(original)

    def all_reduce(self, output: Tensor | Any, group: Any = None, reduce_op: Any = None) -> Tensor | Any:
        """Sum (or average) tensors across processes; numbers become tensors on the device.

        ``output`` is Lightning's name for the data to reduce, so that keyword calls work. ``reduce_op=None``
        sums, as in Lightning (``fabric.all_reduce`` passes its own default, ``"mean"``).

        Raises:
            InvalidConfigError: A reduce op other than ``"sum"``, ``"mean"`` or ``"avg"``.
        """
        op = "sum" if reduce_op is None else getattr(reduce_op, "name", reduce_op)
        op = op.lower() if isinstance(op, str) else op
        if op not in _REDUCE_OPS:
            raise InvalidConfigError(
                f"`{type(self).__name__}.all_reduce(reduce_op={reduce_op!r})` is not supported. Valid choices: "
                f"{', '.join(repr(o) for o in _REDUCE_OPS)}.",
                argument="reduce_op",
                value=reduce_op,
            )
        if not self._launched:
            return output
        _no_group(group, "all_reduce")
        data = convert_to_tensors(output, self.root_device)
        return apply_to_collection(data, Tensor, self._all_reduce_one, op != "sum")

    def _all_reduce_one(self, tensor: Tensor, mean: bool) -> Tensor:
        import torch_xla.core.xla_model as xm

        reduced: Tensor = xm.all_reduce(xm.REDUCE_SUM, tensor.to(self.root_device))
        return reduced / self.world_size if mean else reduced

    def barrier(self, name: str | None = None, *args: Any, **kwargs: Any) -> None:
        """Wait until every process gets here (extra arguments are accepted and ignored, as in Lightning)."""
        if self._launched:
            import torch_xla.core.xla_model as xm

            xm.rendezvous(name or "fabric_core_xla.barrier")

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Send ``obj`` from global rank ``src`` to every process.

        Tensors travel as tensors (every process must pass one of the same shape); anything else is
        pickled, so other processes may pass anything (``None``) of any size.
        """
        if not self._launched:
            return obj
        import torch_xla.core.xla_model as xm

        if isinstance(obj, Tensor):
            original = obj.device
            shaped = obj.reshape(1) if obj.dim() == 0 else obj
            buffer = shaped.to(self.root_device).clone()
            xm.collective_broadcast([buffer], root_ordinal=src)
            return cast(T, buffer.reshape(obj.shape).to(original))
        payload = b""
        if self.global_rank == src:
            stream = io.BytesIO()
            torch.save(obj, stream)
            payload = stream.getvalue()
        received = xm.rendezvous("fabric_core_xla.broadcast", payload)[src]
        loaded: T = torch.load(io.BytesIO(received), weights_only=False)
        return loaded

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Combine one boolean per process: ``all`` of them, else any of them."""
        if not self._launched:
            return decision
        votes = self.all_reduce(torch.tensor(int(decision), device=self.root_device), reduce_op="sum")
        return bool(votes.item() == self.world_size) if all else bool(votes.item() > 0)

    # -- checkpoints -------------------------------------------------------------------------------------
    def save_checkpoint(
        self, path: PathLike, state: Mapping[str, Any], storage_options: Any = None, filter: StateFilter | None = None
    ) -> None:
        """Write ``state`` to ``path``; every process must call this.

        Pending XLA work runs first on every process, so reading the tensors cannot leave one process
        waiting in a collective. :class:`XLACheckpointIO` is called on every process and writes on global
        rank 0; any other checkpoint I/O is called on global rank 0 only.
        """
        import torch_xla.core.xla_model as xm

        xm.mark_step()
        checkpoint = self.state_to_save(state, filter)
        if isinstance(self.checkpoint_io, XLACheckpointIO) or self.is_global_zero:
            self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options=storage_options)


def _check_precision(precision: Precision | None) -> None:
    """Refuse a precision other than :class:`XLAPrecision`: the optimizer step must go through torch_xla.

    Raises:
        ArgumentTypeError: Another precision (a ``TypeError``, as Lightning raises).
    """
    if precision is not None and not isinstance(precision, XLAPrecision):
        raise ArgumentTypeError(
            f"The XLA strategy can only work with the `XLAPrecision` plugin, found {type(precision).__name__}. "
            "Pass `precision='32-true'`, '16-true' or 'bf16-true', or an `XLAPrecision(...)`.",
            argument="precision",
            value=precision,
        )


def _no_group(group: Any, method: str) -> None:
    if group is not None:
        raise InvalidConfigError(
            f"`XLAStrategy.{method}(group={group!r})`: process groups are not supported on XLA; pass `group=None`.",
            argument="group",
            value=group,
        )
