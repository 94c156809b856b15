"""The base of the FSDP and model-parallel strategies: sharded (DTensor) parameters end to end.

Modules are created on the meta device if asked, sharded by the subclass, clipped and gathered across shards,
and checkpointed as a DCP folder or one full file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final

import torch
from torch import Tensor
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import InvalidConfigError, PathIsADirectoryError
from fabric_core.io.distributed import is_distributed_checkpoint
from fabric_core.io.locations import is_dir
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.strategies.strategy import LoadTarget
from fabric_core.strategies.wiring import ParallelWiring, wired
from fabric_core.utilities.init import materialize_distributed_module
from fabric_core.utilities.types import PathLike, StateFilter
from fabric_core_fsdp import _state
from fabric_core_fsdp._parameters import ShardedBackwardSyncControl, gathered, local, total_norm
from fabric_core_fsdp._wrapper import has_fsdp1_units

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["STATE_DICT_TYPES", "FilteredShardsError", "ShardedStrategy", "is_sharded_module", "move_metrics_to_device"]

STATE_DICT_TYPES: Final = ("sharded", "full")
# Wrappers that put a segment into parameter names but not into state-dict keys.
_NAME_SEGMENTS: Final = ("_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(name: str) -> str:
    """A parameter name without the segments that activation checkpointing and ``torch.compile`` add."""
    for segment in _NAME_SEGMENTS:
        name = name.replace(segment, "")
    return name


class FilteredShardsError(InvalidConfigError, NotImplementedError):
    """``filter=`` with a sharded checkpoint (a ``NotImplementedError`` too, as in Lightning)."""


def is_sharded_module(module: object) -> bool:
    """Whether ``module`` is a module whose parameters are sharded: DTensors (FSDP2, tensor parallel) or FSDP1
    units."""
    if not isinstance(module, Module):
        return False
    return any(isinstance(p, DTensor) for p in module.parameters()) or has_fsdp1_units(module)


def move_metrics_to_device(module: Module, device: torch.device) -> None:
    """Move the torchmetrics ``Metric`` submodules of ``module`` to ``device`` (when torchmetrics is in use).

    Sharding moves only parameters and buffers: a metric's states are neither, so they would stay where the
    model was created while its inputs arrive on ``device``. A module can hold a ``Metric`` only once torchmetrics
    is imported, so it is not imported here (that takes seconds, on every rank).
    """
    if "torchmetrics" not in sys.modules:
        return
    from torchmetrics import Metric

    for metric in (m for m in module.modules() if isinstance(m, Metric)):
        metric.to(device)  # in place for a module


class ShardedStrategy(ParallelStrategy):
    """The base of strategies whose parameters are DTensors sharded over a device mesh.

    Subclasses build the mesh in :meth:`setup_environment` and shard modules in :meth:`shard_module`.

    Args:
        state_dict_type: ``"sharded"`` saves a folder (one file per rank, any number of processes can load it);
            ``"full"`` gathers everything on rank 0 and writes one file.
        **wiring: As for :class:`~fabric_core.strategies.parallel.ParallelStrategy`; ``start_method`` is
            ``"popen"`` (run the script again per device) unless it is ``"spawn"``, ``"fork"`` or ``"forkserver"``.

    Raises:
        InvalidConfigError: An unknown ``start_method`` or ``state_dict_type``.
    """

    #: How the error for a checkpoint state without a sharded model names it (Lightning's word per strategy).
    model_kind: ClassVar[str] = "distributed"

    @wired(ParallelWiring, start_method="popen")
    def __init__(self, state_dict_type: str = "sharded", **wiring: Unpack[ParallelWiring]) -> None:
        super().__init__(**wiring)
        if state_dict_type not in STATE_DICT_TYPES:
            raise InvalidConfigError(
                f"`{type(self).__name__}(state_dict_type={state_dict_type!r})` is not supported. "
                f"Valid choices: {', '.join(repr(c) for c in STATE_DICT_TYPES)}.",
                argument="state_dict_type",
                value=state_dict_type,
            )
        self._state_dict_type = state_dict_type
        self._device_mesh: DeviceMesh | None = None
        self._modules: list[weakref.ReferenceType[Module]] = []
        self._backward_sync_control = ShardedBackwardSyncControl()

    @property
    def state_dict_type(self) -> str:
        """``"sharded"`` or ``"full"``: how :meth:`save_checkpoint` writes."""
        return self._state_dict_type

    @property
    def device_mesh(self) -> DeviceMesh:
        """The device mesh the parameters are sharded over (exists after :meth:`setup_environment`).

        Raises:
            RuntimeError: Accessed before the processes were launched.
        """
        if self._device_mesh is None:
            raise RuntimeError(
                "Accessing the device mesh before processes have initialized is not allowed: "
                f"`{type(self).__name__}.device_mesh` exists once the processes run. Call `fabric.launch()` first."
            )
        return self._device_mesh

    @property
    def modules(self) -> list[Module]:
        """The modules this strategy has set up and that are still alive."""
        return [m for m in (ref() for ref in self._modules) if m is not None]

    def _set_up(self, module: Module) -> Module:
        """Count ``module`` among :attr:`modules` (weakly: a model the user drops is not kept) and return it."""
        self._modules.append(weakref.ref(module))
        return module

    # -- modules and optimizers ----------------------------------------------------------------------------
    def shard_module(self, module: Module) -> Module:
        """Turn the module's parameters into sharded DTensors (subclasses decide how)."""
        raise NotImplementedError

    def setup_module(self, module: Module) -> Module:
        """Shard ``module``, then materialise what was created on the meta device (see :meth:`module_init_context`)."""
        module = self.shard_module(module)
        with torch.no_grad(), warnings.catch_warnings():
            # Each rank initialises its own shards; DTensor's notice about CPU random ops does not apply.
            warnings.filterwarnings("ignore", message="DTensor random operators")
            materialize_distributed_module(module, self.root_device)
        move_metrics_to_device(module, self.root_device)
        return self._set_up(module)

    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        """Shard the module and point optimizers created before that at the new (DTensor) parameters.

        Raises:
            InvalidConfigError: An optimizer already has state (it stepped before the model was sharded), or
                holds a parameter that is not in the module.
        """
        names = {id(p): clean_name(n) for n, p in module.named_parameters()}
        for optimizer in optimizers:
            if optimizer.state:
                raise InvalidConfigError(
                    f"`fabric.setup(model, optimizer)` with `{type(self).__name__}`: the optimizer already has state "
                    "(it stepped before the model was sharded), which cannot be moved onto the shards. Set up the "
                    "model and optimizer before training, or create the optimizer after `fabric.setup_module(model)`.",
                    argument="optimizers",
                )
            if any(id(p) not in names for group in optimizer.param_groups for p in group["params"]):
                raise InvalidConfigError(
                    "`fabric.setup(model, optimizer)`: the optimizer holds parameters that are not in the model, so "
                    "they cannot be matched with their shards. Create the optimizer after "
                    "`model = fabric.setup_module(model)` and set it up with `fabric.setup_optimizers(optimizer)`.",
                    argument="optimizers",
                )
        module = self.setup_module(module)
        sharded = {clean_name(n): p for n, p in module.named_parameters()}
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                group["params"] = [sharded[names[id(p)]] for p in group["params"]]
        return module, [self.setup_optimizer(o) for o in optimizers], scheduler

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """Check that the optimizer updates the sharded parameters.

        Raises:
            InvalidConfigError: It references no DTensor parameter (it was created before the model was set up).
        """
        if not any(isinstance(p, DTensor) for group in optimizer.param_groups for p in group["params"]):
            raise InvalidConfigError(
                f"The optimizer does not seem to reference any sharded parameters of `{type(self).__name__}`. HINT: "
                "create the optimizer after setting up the model, from the parameters it has then: "
                "`model = fabric.setup_module(model)`, `optimizer = torch.optim.AdamW(model.parameters())`, "
                "`optimizer = fabric.setup_optimizers(optimizer)`; or pass both at once: "
                "`fabric.setup(model, optimizer)`.",
                argument="optimizer",
            )
        return optimizer

    def module_to_device(self, module: Module) -> None:
        """Nothing: sharding moves each shard to this process's device (a whole model might not fit there)."""

    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """With ``empty_init=True`` modules are created on the meta device: no memory until they are sharded.

        :meth:`setup_module` then allocates each rank's shards and calls ``reset_parameters()`` on every
        submodule that has one. Without it, modules are created on this process's device and initialised.
        """
        stack = contextlib.ExitStack()
        stack.enter_context(torch.device("meta") if empty_init else self.root_device)
        stack.enter_context(self.precision.module_init_context())
        return stack

    # -- gradients ------------------------------------------------------------------------------------------
    def _clip_norm(
        self, module: Module, optimizer: Optimizer, max_norm: float, norm_type: float, error_if_nonfinite: bool
    ) -> Tensor:
        """Clip by the total norm over all shards (the norm of the unsharded gradients); return that norm.

        Raises:
            RuntimeError: The norm is not finite and ``error_if_nonfinite`` (on every rank alike).
        """
        parameters = list(self.precision.main_params(optimizer))
        grads = [p.grad for p in parameters if p.grad is not None]
        total = total_norm(grads, float(norm_type))
        if error_if_nonfinite and not bool(torch.isfinite(total)):
            raise RuntimeError(
                f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, so it "
                "cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, "
                "set `error_if_nonfinite=False`"
            )
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
        return total

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float | int) -> None:
        """Clamp every gradient element (each rank its shards) to ``[-clip_val, clip_val]``."""
        self.precision.unscale_gradients(optimizer)
        with torch.no_grad():
            for p in self.precision.main_params(optimizer):
                if p.grad is not None:
                    local(p.grad).clamp_(-clip_val, clip_val)

    # -- gathered parameters ---------------------------------------------------------------------------------
    def gathered_parameters(
        self, params: Iterable[Tensor], modifier_rank: int | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """Context in which the modules holding ``params`` have their full parameters (all ranks must enter).

        Inside, read the parameters through the modules (``model.layer.weight``): FSDP swaps in whole
        tensors. With ``modifier_rank``, that rank's changes inside the block are written back to the shards
        of every rank on exit; otherwise changes are discarded.
        """
        return gathered(self.modules, params, modifier_rank)

    # -- checkpoints ----------------------------------------------------------------------------------------
    def save_checkpoint(
        self, path: PathLike, state: Mapping[str, Any], storage_options: Any = None, filter: StateFilter | None = None
    ) -> None:
        """Save ``state`` as a sharded folder or, with ``state_dict_type="full"``, one file written by rank 0.

        Must be called on every rank. ``state`` must hold a model set up by this strategy (more than one is
        fine), as in Lightning.

        Raises:
            TypeError: ``storage_options`` was given.
            FilteredShardsError: ``filter`` with a sharded checkpoint (it works with ``state_dict_type="full"``).
            InvalidConfigError: ``state`` holds no sharded model (a ``ValueError``, as in Lightning).
            PathIsADirectoryError: A full checkpoint's path is a folder other than a sharded checkpoint.
        """
        name = type(self).__name__
        if storage_options is not None:
            raise TypeError(
                f"`{name}.save_checkpoint(..., storage_options=...)` is not supported: `{name}` writes each rank's "
                f"shards itself (got `storage_options={storage_options!r}`). Pass `storage_options=None`."
            )
        if filter is not None and self._state_dict_type == "sharded":
            raise FilteredShardsError(
                f"`fabric.save(..., filter=...)`: {name} doesn't support loading sharded filtered checkpoints, so "
                f"saving them is disabled: each rank writes its shards as they are. Save with "
                "`state_dict_type='full'` to filter, or filter after `consolidate(...)`.",
                argument="filter",
                value=filter,
            )
        full = self._state_dict_type == "full"
        if full and is_dir(path) and not is_distributed_checkpoint(path):
            raise PathIsADirectoryError(
                f"The checkpoint path exists and is a directory: {os.fspath(path)}. A full checkpoint is one file and "
                "replaces only a file or a sharded checkpoint folder: choose another path.",
                argument="path",
                value=os.fspath(path),
            )
        if not any(is_sharded_module(value) for value in state.values()):
            raise InvalidConfigError(
                f"Could not find a {self.model_kind} model in the provided checkpoint state. Please provide the model "
                "as part of the state like so: `fabric.save(path, {'model': model, ...})`. Make sure you set up the "
                f"model (and optimizers if any) through `fabric.setup(...)` before saving the checkpoint (got the "
                f"keys {sorted(state)}).",
                argument="state",
            )
        if full:
            _state.save_full(self, path, state, filter)
        else:
            _state.save_sharded(self, path, state)

    def load_checkpoint(
        self, path: PathLike, state: LoadTarget = None, strict: bool = True, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Restore ``state`` from a sharded folder (written by any number of processes) or a full file.

        Must be called on every rank. Returns the checkpoint entries ``state`` did not ask for (the whole
        checkpoint, in CPU memory, when ``state`` is empty).
        """
        return _state.load(self, path, state, strict=strict, weights_only=weights_only, set_up=self.modules)

    # -- teardown and pickling ------------------------------------------------------------------------------
    def release_modules(self) -> None:
        """Forget the set-up modules and the mesh, which belong to the process group being destroyed."""
        self._modules.clear()
        self._device_mesh = None

    def __getstate__(self) -> dict[str, Any]:
        # Spawn pickles the strategy: weak references cannot be, and the mesh belongs to a process group.
        state = self.__dict__.copy()
        state["_modules"] = []
        state["_device_mesh"] = None
        return state
