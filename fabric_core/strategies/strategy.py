"""The strategy interface: how modules, optimizers, collectives and checkpoints work on the devices."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeVar

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core._deferred import lightning_reexports
from fabric_core.accelerators.accelerator import Accelerator
from fabric_core.io.checkpoint_io import CheckpointIO
from fabric_core.io.restore import check_requested_keys, load_module, restore_state
from fabric_core.io.weights.pieces import Piece, load_targets, save_sources
from fabric_core.precision.precision import Precision
from fabric_core.strategies.wiring import WIRING_ORDER, Placement, Wiring, wired
from fabric_core.utilities.apply_func import move_data_to_device
from fabric_core.utilities.init import EmptyInit
from fabric_core.utilities.types import PathLike, StateFilter, Stateful

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fabric_core.environments.environment import ClusterEnvironment
    from fabric_core.launchers.launcher import Launcher

__all__ = ["BackwardSyncControl", "LoadTarget", "Stateful", "Strategy", "put_filtered"]

T = TypeVar("T")
#: What ``load_checkpoint`` restores: a module or optimizer (``fabric.load_raw``), a dict of them and plain values
#: (``fabric.load``'s state), or ``None`` for the whole checkpoint, returned.
LoadTarget: TypeAlias = Module | Optimizer | dict[str, Any] | None


def put_filtered(target: dict[str, Any], key: str, value: Any, filter: StateFilter | None) -> None:
    """Put ``value`` under ``key`` in ``target``, with only the entries that ``filter[key](name, entry)`` keeps.

    A dict whose filter keeps none of its entries leaves ``key`` out of ``target`` altogether, as in
    Lightning: a checkpoint then has no key that a filter emptied. Values that are no dict, and keys
    without a filter, are put unchanged.
    """
    if filter is None or key not in filter or not isinstance(value, dict):
        target[key] = value
        return
    kept = {name: entry for name, entry in value.items() if filter[key](name, entry)}
    if kept:
        target[key] = kept


class BackwardSyncControl(ABC):
    """Skips gradient synchronisation for ``fabric.no_backward_sync(module)``."""

    @abstractmethod
    def no_backward_sync(self, module: Module, enabled: bool) -> contextlib.AbstractContextManager[Any]:
        """Context in which backward does not synchronise the gradients of ``module``."""

    def wrapper_no_sync(
        self, module: Module, enabled: bool, wrapper: type[Module]
    ) -> contextlib.AbstractContextManager[Any]:
        """``module.no_sync()`` when ``enabled``, for a ``wrapper`` with one (DDP's, FSDP1's); else a no-op.

        Raises:
            TypeError: ``module`` is not wrapped in ``wrapper`` (it was not set up by the strategy).
        """
        if not enabled:
            return contextlib.nullcontext()
        if not isinstance(module, wrapper):
            raise TypeError(
                "Blocking backward sync is only possible if the module passed to "
                f"`{type(self).__name__}.no_backward_sync` is wrapped in `{wrapper.__name__}`. "
                f"Got: {type(module).__name__}."
            )
        sync_off: contextlib.AbstractContextManager[Any] = module.no_sync()  # type: ignore[operator]
        return sync_off


class Strategy(ABC):
    """Owns the accelerator, the precision and the checkpoint I/O, and decides how they work together.

    Built by name from the catalog (its entry's ``defaults`` and the user's options become constructor
    arguments), then completed by :meth:`connect` with what selection decided.

    Args:
        **wiring: ``accelerator``, ``checkpoint_io`` and ``precision`` (see :class:`Wiring`); usually left to
            selection.
    """

    #: What the kernel knows this class by (see ``fabric_core.plugin_api.KIND_ATTRIBUTE``).
    __fabric_core_kind__: ClassVar[str] = "strategy"

    #: Whether model and optimizers must be set up together (``fabric.setup_optimizers`` is refused).
    requires_joint_setup: ClassVar[bool] = False
    #: Whether one process drives all devices (no ``fabric.launch()`` needed before setup).
    single_process: ClassVar[bool] = True
    #: Whether :meth:`all_gather` takes a whole nested collection (else ``Fabric`` calls it per tensor).
    gathers_collections: ClassVar[bool] = False
    #: Whether ``fabric.no_backward_sync`` has nothing to skip here, so that it does nothing and says nothing
    #: (one device; a strategy that reduces gradients in its optimizer step, as XLA's does).
    backward_sync_is_noop: ClassVar[bool] = False
    #: Where each model runs its own backward (DeepSpeed: one engine per model), the message of the
    #: ``ValueError`` that ``fabric.backward(loss)`` raises without ``model=`` once several models are set up.
    backward_needs_model: ClassVar[str | None] = None

    @classmethod  # noqa: B027 - optional hook
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Lightning's registration hook, for registries that code keeps for itself (lightning.pytorch does).

        ``Fabric(strategy=...)`` never calls it: fabric-core's strategies register through plugins
        (``fabric_core_register_strategies``). A subclass meant for such a registry overrides it.
        """

    @wired(Wiring, positional=WIRING_ORDER)
    def __init__(self, **wiring: Unpack[Wiring]) -> None:
        self._accelerator = wiring.get("accelerator")
        self._checkpoint_io = wiring.get("checkpoint_io")
        self._precision = wiring.get("precision")
        self._launcher: Launcher | None = None
        self._backward_sync_control: BackwardSyncControl | None = None

    # -- wiring ------------------------------------------------------------------------------------------
    @property
    def accelerator(self) -> Accelerator | None:
        return self._accelerator

    @accelerator.setter
    def accelerator(self, accelerator: Accelerator | None) -> None:
        self._accelerator = accelerator

    @property
    def checkpoint_io(self) -> CheckpointIO:
        if self._checkpoint_io is None:
            self._checkpoint_io = self.default_checkpoint_io()
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO | None) -> None:
        self._checkpoint_io = io

    @property
    def precision(self) -> Precision:
        if self._precision is None:
            self._precision = self.default_precision()
        return self._precision

    @precision.setter
    def precision(self, precision: Precision | None) -> None:
        self._precision = precision

    def default_checkpoint_io(self) -> CheckpointIO:
        """The checkpoint I/O used when none was given (override for a device-specific one)."""
        from fabric_core.io.torch_io import TorchCheckpointIO

        return TorchCheckpointIO()

    def default_precision(self) -> Precision:
        """The precision used when none was given or connected: full fp32."""
        return Precision()

    @property
    def launcher(self) -> Launcher | None:
        return self._launcher

    def connect(
        self,
        *,
        accelerator: Accelerator,
        precision: Precision,
        checkpoint_io: CheckpointIO | None,
        cluster_environment: ClusterEnvironment,
        parallel_devices: list[torch.device],
        num_nodes: int,
    ) -> None:
        """Complete the strategy with what selection decided; values the user set on it are kept.

        The components fill what the constructor left empty; where the processes run is handed to
        :meth:`place`, which the strategies that care about it override (this is the only ``connect``).
        """
        if self._accelerator is None:
            self._accelerator = accelerator
        if self._precision is None:
            self._precision = precision
        if self._checkpoint_io is None:
            self._checkpoint_io = checkpoint_io
        self.place(Placement(cluster_environment, list(parallel_devices), num_nodes))

    def place(self, placement: Placement) -> None:  # noqa: B027 - optional hook
        """Take the devices, ranks and nodes selection decided, keeping those given to the constructor."""

    # -- topology ----------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device of this process."""

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
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        """Arguments for a ``DistributedSampler``; ``None`` where each process sees the whole dataset."""
        return None

    def setup_environment(self) -> None:
        """Prepare this process: the device, then (in parallel strategies) the process group."""
        assert self.accelerator is not None
        self.accelerator.setup_device(self.root_device)

    # -- modules and optimizers --------------------------------------------------------------------------
    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        """Set up a model and its optimizers together (DeepSpeed needs both at once)."""
        module = self.setup_module(module)
        optimizers = [self.setup_optimizer(o) for o in optimizers]
        return module, optimizers, scheduler

    def setup_module(self, module: Module) -> Module:
        """Wrap or shard the module for this strategy (identity for one device)."""
        return module

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """Wrap the optimizer for this strategy (identity for most)."""
        return optimizer

    def module_to_device(self, module: Module) -> None:
        module.to(self.root_device)

    def batch_to_device(self, batch: Any, device: torch.device | None = None) -> Any:
        return move_data_to_device(batch, device or self.root_device)

    def process_dataloader(self, dataloader: Any) -> Any:
        """Adapt a dataloader set up by ``fabric.setup_dataloaders`` (XLA wraps it in a device loader)."""
        return dataloader

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Tensors created inside land on this process's device in the precision's dtype."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.root_device)
        stack.enter_context(self.precision.tensor_init_context())
        return stack

    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """Modules created inside land on the device and, with ``empty_init``, skip initialisation."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.root_device)
        stack.enter_context(EmptyInit(enabled=bool(empty_init)))
        stack.enter_context(self.precision.module_init_context())
        return stack

    def gathered_parameters(
        self, params: Iterable[Tensor], modifier_rank: int | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """Context in which sharded parameters are whole (nothing to do when they are not sharded)."""
        return contextlib.nullcontext()

    # -- the training step -------------------------------------------------------------------------------
    def backward(self, tensor: Tensor, module: Module | None, *args: Any, **kwargs: Any) -> None:
        tensor = self.precision.pre_backward(tensor, module)
        self.precision.backward(tensor, module, *args, **kwargs)
        self.precision.post_backward(tensor, module)

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        return self.precision.optimizer_step(optimizer, **kwargs)

    @property
    def backward_sync_control(self) -> BackwardSyncControl | None:
        return self._backward_sync_control

    def clip_gradients_norm(
        self,
        module: Module,
        optimizer: Optimizer,
        max_norm: float | int,
        norm_type: float | int = 2.0,
        error_if_nonfinite: bool = True,
    ) -> Tensor:
        """Clip the gradients of the optimizer's parameters by their total norm; return that norm.

        Loss-scaled gradients are unscaled first; :meth:`_clip_norm` then takes the norm and clips by it, and is
        what a strategy whose gradients are sharded, or owned by an engine, overrides.

        Args:
            module: The model set up by this strategy.
            optimizer: The optimizer whose parameters' gradients are clipped.
            max_norm: The largest total norm the gradients may have.
            norm_type: The order of the norm (``float("inf")`` for the largest element).
            error_if_nonfinite: Raise when the total norm is ``nan`` or ``inf`` instead of clipping by it.

        Raises:
            RuntimeError: The total norm is not finite and ``error_if_nonfinite``.
        """
        self.precision.unscale_gradients(optimizer)
        return self._clip_norm(module, optimizer, max_norm, norm_type, error_if_nonfinite)

    def _clip_norm(
        self, module: Module, optimizer: Optimizer, max_norm: float, norm_type: float, error_if_nonfinite: bool
    ) -> Tensor:
        """:meth:`clip_gradients_norm` on unscaled gradients: torch's ``clip_grad_norm_`` over the main parameters."""
        parameters = list(self.precision.main_params(optimizer))
        return torch.nn.utils.clip_grad_norm_(
            parameters, max_norm=max_norm, norm_type=norm_type, error_if_nonfinite=error_if_nonfinite
        )

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float | int) -> None:
        """Clamp every gradient of the optimizer's parameters to ``[-clip_val, clip_val]``."""
        self.precision.unscale_gradients(optimizer)
        torch.nn.utils.clip_grad_value_(list(self.precision.main_params(optimizer)), clip_value=clip_val)

    # -- collectives: identity in one process ------------------------------------------------------------
    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        return tensor

    def all_reduce(self, tensor: Tensor | Any, group: Any = None, reduce_op: Any = "mean") -> Tensor | Any:
        return tensor

    def barrier(self, name: str | None = None) -> None:
        return None

    def broadcast(self, obj: T, src: int = 0) -> T:
        return obj

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision

    # -- checkpoints -------------------------------------------------------------------------------------
    def get_module_state_dict(self, module: Module) -> dict[str, Any]:
        return module.state_dict()

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> None:
        module.load_state_dict(state_dict, strict=strict)

    def weights_to_save(self, module: Module, whole: bool = False) -> list[Piece]:
        """What this rank holds of ``module``'s weights, for ``fabric.save_raw`` (called on every rank).

        The default reads :meth:`get_module_state_dict`: a DTensor's block is written by the rank that holds it
        (whatever strategy sharded it), a plain tensor by global rank 0. A strategy whose parameters are
        partitioned some other way returns pieces that gather inside their ``fetch``.

        Args:
            module: What the strategy set up.
            whole: Every tensor whole on rank 0 (for writers that cannot place blocks, such as object storage).
        """
        return save_sources(self.get_module_state_dict(module), self.is_global_zero, whole=whole)

    @contextlib.contextmanager
    def weights_to_load(self, module: Module) -> Iterator[list[Piece]]:
        """This rank's tensors that ``fabric.load_raw`` of a safetensors file reads into (on every rank).

        The default yields the module's parameters and buffers (a DTensor's local block); a strategy whose
        parameters are partitioned some other way gathers them around the ``yield``.
        """
        yield load_targets(module)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def state_to_save(
        self,
        state: Mapping[str, Any],
        filter: StateFilter | None = None,
    ) -> dict[str, Any]:
        """Turn modules, optimizers and stateful objects in ``state`` into plain state dicts."""
        converted: dict[str, Any] = {}
        for key, obj in state.items():
            if isinstance(obj, Module):
                value = self.get_module_state_dict(obj)
            elif isinstance(obj, Optimizer):
                value = self.get_optimizer_state(obj)
            elif isinstance(obj, Stateful):
                value = obj.state_dict()
            else:
                value = obj
            put_filtered(converted, key, value, filter)
        return converted

    def save_checkpoint(
        self, path: PathLike, state: Mapping[str, Any], storage_options: Any = None, filter: StateFilter | None = None
    ) -> None:
        """Write ``state`` to ``path``: only global rank 0 writes."""
        checkpoint = self.state_to_save(state, filter)
        if self.is_global_zero:
            # By keyword, as Lightning calls it: a user's CheckpointIO may name its parameters only.
            self.checkpoint_io.save_checkpoint(checkpoint=checkpoint, path=path, storage_options=storage_options)

    def load_checkpoint(
        self, path: PathLike, state: LoadTarget = None, strict: bool = True, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Read a checkpoint and restore ``state`` from it (see ``Fabric.load``).

        Where ``state`` holds a module or an optimizer, the file is mapped rather than read (when the checkpoint
        I/O declares :attr:`~fabric_core.io.checkpoint_io.CheckpointIO.supports_mmap`, and ``weights_only`` is
        not ``False``): modules copy their tensors straight from the file's pages, optimizers copy theirs out
        one at a time, which spares reading the checkpoint into memory first (see ``restore_state``).
        """
        restored = state.values() if isinstance(state, dict) else [state]
        mapped = (
            weights_only is not False
            and self.checkpoint_io.supports_mmap
            and any(isinstance(obj, (Module, Optimizer)) for obj in restored)
        )
        options = {"mmap": True} if mapped else {}
        checkpoint = self.checkpoint_io.load_checkpoint(path, weights_only=weights_only, **options)
        if isinstance(state, Module):
            load_module(self, state, checkpoint, strict=strict, mapped=mapped)
            return {}
        if isinstance(state, Optimizer):
            from fabric_core.io.restore import load_optimizer  # beside restore_state, imported with it already

            load_optimizer(state, checkpoint, mapped=mapped)
            return {}
        if not state:
            return checkpoint
        return restore_state(self, state, checkpoint, strict=strict, mapped=mapped)

    def teardown(self) -> None:
        """Release the devices and the checkpoint I/O."""
        self.precision.teardown()
        if self.accelerator is not None:
            self.accelerator.teardown()
        self.checkpoint_io.teardown()


class _Sharded(ABC):
    """Lightning's marker for strategies that shard parameters as modules are created.

    Any class with a ``module_sharded_context()`` method counts (``isinstance(strategy, _Sharded)``), so the
    sharding strategies of every plugin are ``_Sharded`` without naming this class.
    """

    @abstractmethod
    def module_sharded_context(self) -> contextlib.AbstractContextManager[Any]:
        """A context in which created modules are sharded right away."""

    @classmethod
    def __subclasshook__(cls, subclass: type) -> Any:  # bool, or NotImplemented for subclasses
        if cls is _Sharded:
            return bool(callable(getattr(subclass, "module_sharded_context", None)))
        return NotImplemented


def _apply_filter(key: str, filter: StateFilter, source_dict: object, target_dict: dict[str, Any]) -> None:
    """Lightning's argument order for :func:`put_filtered`."""
    put_filtered(target_dict, key, source_dict, filter)


# Lightning's private names (TBroadcast/TReduce are the type variables of broadcast and reduce).
TBroadcast = TypeVar("TBroadcast")
TReduce = TypeVar("TReduce")
_BackwardSyncControl = BackwardSyncControl
_validate_keys_for_strict_loading = check_requested_keys

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
