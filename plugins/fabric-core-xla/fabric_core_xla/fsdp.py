"""Fully sharded data parallel on XLA devices, with torch_xla's ``XlaFullyShardedDataParallel``."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, TypeAlias

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import FabricCoreWarning, InvalidConfigError
from fabric_core.io.restore import restore_state
from fabric_core.strategies.strategy import BackwardSyncControl, LoadTarget, put_filtered
from fabric_core.strategies.wiring import DEVICES_WIRING_ORDER, DevicesWiring, split_wiring, wired
from fabric_core.utilities.apply_func import move_data_to_device
from fabric_core.utilities.types import PathLike, StateFilter
from fabric_core_xla import accelerator, device
from fabric_core_xla.precision import XLAPrecision
from fabric_core_xla.strategy import XLAStrategy

__all__ = [
    "XLAFSDPBackwardSyncControl",
    "XLAFSDPStrategy",
    "checkpointing_kwargs",
    "checkpointing_wrapper",
    "wrap_policy",
]

StateDictType = Literal["sharded", "full"]
#: The module classes that get their own wrapper (or their activations recomputed).
_POLICY_SET: TypeAlias = set[type[Module]]
#: An auto-wrap policy: module classes, or torch_xla's ``(module, recurse, unwrapped_params) -> bool``.
_POLICY: TypeAlias = _POLICY_SET | Callable[[Module, bool, int], bool]
_SHARD_FILE: Final = "checkpoint_rank-{rank:08d}-of-{world:08d}.pth"
# Lightning's flag at its ``strategies.xla_fsdp`` path (this module backs it), read here at call time.
_XLA_AVAILABLE = accelerator.XLA_AVAILABLE
_METADATA_KEY: Final = "shard_metadata"


class XLAFSDPStrategy(XLAStrategy):
    """Shards parameters, gradients and optimizer state over the XLA devices (``strategy="xla_fsdp"``).

    Create the optimizer after ``fabric.setup_module(model)``: it must reference the sharded parameters.
    Gradients are reduce-scattered by the wrapper itself, so the optimizer step is a plain
    ``optimizer.step()`` followed by the end of the XLA step.

    Args:
        auto_wrap_policy: Which submodules get their own wrapper: a set of module classes, or a callable
            ``(module, recurse, unwrapped_params) -> bool`` as torch_xla expects.
        activation_checkpointing_policy: A set of module classes whose activations are recomputed in the
            backward pass instead of stored (they are wrapped as well).
        state_dict_type: ``"sharded"``: ``fabric.save(path, ...)`` writes a folder with one file per process
            (fast, resumable with the same number of processes). ``"full"``: one consolidated file with the
            whole model, loadable without XLA; optimizer states are left out of it.
        sequential_save: Write the shard files one process after another (less host memory at once).
        **kwargs: The wiring of :class:`XLAStrategy` (``accelerator``, ``parallel_devices``, ``checkpoint_io``
            for single-file checkpoints, ``precision``); the other keywords are passed to
            ``XlaFullyShardedDataParallel`` (``compute_dtype``, ``flatten_parameters``, ...).

    Raises:
        InvalidConfigError: An unknown ``state_dict_type``.
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    backward_sync_is_noop: ClassVar[bool] = False  # unlike its base: a control skips the reduce-scatter

    @wired(
        DevicesWiring,
        positional=(
            *DEVICES_WIRING_ORDER,
            "auto_wrap_policy",
            "activation_checkpointing_policy",
            "state_dict_type",
            "sequential_save",
        ),
    )
    def __init__(
        self,
        auto_wrap_policy: set[type[Module]] | Callable[..., bool] | None = None,
        activation_checkpointing_policy: set[type[Module]] | None = None,
        state_dict_type: StateDictType = "sharded",
        sequential_save: bool = False,
        **kwargs: Any,
    ) -> None:
        device.require_torch_xla(type(self).__name__, _XLA_AVAILABLE)
        if state_dict_type not in ("sharded", "full"):
            raise InvalidConfigError(
                f"`XLAFSDPStrategy(state_dict_type={state_dict_type!r})`: valid choices are 'sharded' and 'full'.",
                argument="state_dict_type",
                value=state_dict_type,
            )
        wiring, kwargs = split_wiring(kwargs, DevicesWiring)
        super().__init__(sync_module_states=False, **wiring)  # the wrapper shards what each process holds
        self._auto_wrap_policy = auto_wrap_policy
        self._activation_checkpointing_policy = activation_checkpointing_policy
        self._state_dict_type: StateDictType = state_dict_type
        self._sequential_save = sequential_save
        self._fsdp_kwargs = kwargs
        self._backward_sync_control = XLAFSDPBackwardSyncControl()

    # -- modules and optimizers --------------------------------------------------------------------------
    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        """Not possible: sharding replaces the parameters, so optimizers must be created afterwards.

        Raises:
            InvalidConfigError: Always, with the order that works.
        """
        raise InvalidConfigError(
            f"`{type(self).__name__}` cannot set up a model and its optimizers together, because sharding "
            "replaces the parameters the optimizers hold. Call `model = fabric.setup_module(model)`, then create "
            "the optimizer from `model.parameters()`, then `optimizer = fabric.setup_optimizers(optimizer)`.",
            argument="strategy",
            value="xla_fsdp",
        )

    def setup_module(self, module: Module) -> Module:
        """Shard the module (and the submodules the policies name) across the processes."""
        from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as XlaFSDP

        if any(isinstance(m, XlaFSDP) for m in module.modules()):
            return module
        wrapped: Module = XlaFSDP(module, **self._parse_fsdp_kwargs())
        return wrapped

    def _parse_fsdp_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the ``XlaFullyShardedDataParallel`` wrapper (Lightning's name).

        The user's own, the precision's dtype as ``compute_dtype`` (torch_xla computes in float32 otherwise),
        the wrap policy, and the wrapper that checkpoints the classes of ``activation_checkpointing_policy``.
        Unlike Lightning's, the wrap policy also wraps those classes: torch_xla applies the checkpointing
        wrapper to wrapped modules only, so without it they would not be checkpointed.

        Raises:
            InvalidConfigError: Both ``auto_wrapper_callable`` and ``activation_checkpointing_policy``.
            TypeError: ``activation_checkpointing_policy`` is not a set of classes.
        """
        kwargs = dict(self._fsdp_kwargs)
        if isinstance(self.precision, XLAPrecision):
            kwargs.setdefault("compute_dtype", self.precision._desired_dtype)
        checkpointed = self._activation_checkpointing_policy
        kwargs = checkpointing_kwargs(checkpointed, kwargs)  # checks the policy first
        policy = wrap_policy(self._auto_wrap_policy, checkpointed or ())
        if policy is not None:
            kwargs.setdefault("auto_wrap_policy", policy)
        return kwargs

    def module_to_device(self, module: Module) -> None:
        """Nothing to do: the wrapper moves each shard to the device."""

    def module_sharded_context(self) -> contextlib.AbstractContextManager[Any]:
        """A context that changes nothing, as Lightning's: :meth:`setup_module` wraps and shards the finished model."""
        return contextlib.nullcontext()

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """Check that the optimizer was created from the sharded parameters.

        Raises:
            InvalidConfigError: It references parameters of the unsharded module.
        """
        if any(getattr(p, "_is_sharded", False) for group in optimizer.param_groups for p in group["params"]):
            return optimizer
        raise InvalidConfigError(
            "The optimizer does not reference any parameters sharded by `XLAFSDPStrategy`. Create it after "
            "`model = fabric.setup_module(model)`, from `model.parameters()`.",
            argument="optimizer",
            value=optimizer,
        )

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Step on the already reduce-scattered gradients, then end the XLA step."""
        import torch_xla.core.xla_model as xm

        output = optimizer.step(**kwargs)
        xm.mark_step()
        return output

    def _clip_norm(
        self, module: Module, optimizer: Optimizer, max_norm: float, norm_type: float, error_if_nonfinite: bool
    ) -> Tensor:
        """Clip by the norm of the whole (sharded) gradient, computed across processes."""
        norm: Tensor = _root(module).clip_grad_norm_(max_norm=max_norm, norm_type=norm_type)
        return norm

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float | int) -> None:
        """Not supported with sharded gradients.

        Raises:
            InvalidConfigError: Always; clip by norm instead.
        """
        raise InvalidConfigError(
            "`XLAFSDPStrategy` cannot clip gradients by value; use `fabric.clip_gradients(..., max_norm=...)`.",
            argument="clip_val",
            value=clip_val,
        )

    # -- checkpoints -------------------------------------------------------------------------------------
    def save_checkpoint(
        self, path: PathLike, state: Mapping[str, Any], storage_options: Any = None, filter: StateFilter | None = None
    ) -> None:
        """Write a folder of shards (``"sharded"``) or one consolidated file (``"full"``); call on every process.

        Raises:
            InvalidConfigError: ``state`` holds no sharded module, or more than one; ``filter`` with
                ``"sharded"``; ``storage_options``.
        """
        import torch_xla.core.xla_model as xm

        if storage_options is not None:
            raise InvalidConfigError(
                f"`XLAFSDPStrategy.save_checkpoint(storage_options={storage_options!r})` is not supported.",
                argument="storage_options",
                value=storage_options,
            )
        if filter is not None and self._state_dict_type == "sharded":
            raise InvalidConfigError(
                "`fabric.save(..., filter=...)` needs `XLAFSDPStrategy(state_dict_type='full')`: a filter cannot "
                "apply to sharded state.",
                argument="filter",
                value=filter,
            )
        (module_key,) = _sharded_modules(state, at_least_one=True)
        module = _root(state[module_key])
        xm.mark_step()
        folder = Path(path) if self._state_dict_type == "sharded" else Path(f"{os.fspath(path)}.shards")
        # A filter sees the consolidated names, so it applies after consolidation.
        shard = self.state_to_save(state)
        shard[_METADATA_KEY] = module.get_shard_metadata()
        self._write_shard(shard, folder)
        if self._state_dict_type == "full":
            self.barrier("fabric_core_xla.fsdp.shards_written")
            if self.is_global_zero:
                self._consolidate(folder, module_key, Path(path), shard, filter)
        self.barrier("fabric_core_xla.fsdp.saved")

    def _write_shard(self, shard: dict[str, Any], folder: Path) -> None:
        name = _SHARD_FILE.format(rank=self.global_rank, world=self.world_size)
        cpu = move_data_to_device(shard, "cpu")
        for turn in range(self.world_size if self._sequential_save else 1):
            if not self._sequential_save or turn == self.global_rank:
                folder.mkdir(parents=True, exist_ok=True)
                torch.save(cpu, folder / name)
            if self._sequential_save:
                self.barrier(f"fabric_core_xla.fsdp.shard_{turn}")

    def _consolidate(
        self,
        folder: Path,
        module_key: str,
        path: Path,
        own: dict[str, Any],
        filter: StateFilter | None,
    ) -> None:
        from torch_xla.distributed.fsdp import consolidate_sharded_state_dicts

        files = sorted(folder.glob(_SHARD_FILE.replace("{rank:08d}", "*").replace("{world:08d}", "*")))
        # Written a moment ago by this job's processes: trusted.
        shards = [torch.load(f, map_location="cpu", weights_only=False) for f in files]
        full = consolidate_sharded_state_dicts([s[module_key] for s in shards], shards[0][_METADATA_KEY])
        checkpoint: dict[str, Any] = {}
        dropped = []
        for key, value in own.items():
            if key == _METADATA_KEY:
                continue
            if key == module_key:
                put_filtered(checkpoint, key, full, filter)
            elif _looks_like_optimizer_state(value):
                dropped.append(key)
            else:
                put_filtered(checkpoint, key, move_data_to_device(value, "cpu"), filter)
        if dropped:
            warnings.warn(
                f"`XLAFSDPStrategy(state_dict_type='full')` leaves the sharded optimizer states {dropped} out of "
                f"{os.fspath(path)!r}; use `state_dict_type='sharded'` to save a checkpoint you can resume from.",
                FabricCoreWarning,
                stacklevel=4,
            )
        self.checkpoint_io.save_checkpoint(checkpoint, path)
        shutil.rmtree(folder, ignore_errors=True)

    def load_checkpoint(
        self, path: PathLike, state: LoadTarget = None, strict: bool = True, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """Load this process's shard from a folder written with ``"sharded"``; call on every process.

        A consolidated (``"full"``) file holds the unsharded model: load it into the model before
        ``fabric.setup_module`` (``fabric.load_raw`` or ``torch.load``), or with a single-device strategy.

        Raises:
            FileNotFoundError: No shard file for this process (e.g. written by another number of processes).
            InvalidConfigError: A full checkpoint into a sharded module, or ``state`` is not a dict.
        """
        folder = Path(path)
        if not folder.is_dir():
            if isinstance(state, Module) or (isinstance(state, dict) and _sharded_modules(state, at_least_one=False)):
                raise InvalidConfigError(
                    f"{os.fspath(path)!r} is a consolidated checkpoint: load it into the model before "
                    "`fabric.setup_module(model)` (e.g. `fabric.load_raw(path, model)`), not into a sharded model.",
                    argument="path",
                    value=os.fspath(path),
                )
            return super().load_checkpoint(path, state, strict=strict, weights_only=weights_only)
        if not isinstance(state, dict) or not state:
            raise InvalidConfigError(
                "Loading a sharded checkpoint needs `state`: a dict holding the sharded model (and optimizers) "
                "to restore, e.g. `fabric.load(path, {'model': model, 'optimizer': optimizer})`.",
                argument="state",
                value=state,
            )
        shard_file = folder / _SHARD_FILE.format(rank=self.global_rank, world=self.world_size)
        if not shard_file.exists():
            found = sorted(p.name for p in folder.iterdir())
            raise FileNotFoundError(
                f"No shard {shard_file.name!r} in {os.fspath(folder)!r} (found {found}): a sharded checkpoint loads "
                "only with the number of processes that wrote it."
            )
        shard = torch.load(shard_file, map_location="cpu", weights_only=True if weights_only is None else weights_only)
        shard.pop(_METADATA_KEY, None)
        remainder = restore_state(self, state, shard, strict=strict)
        self.barrier("fabric_core_xla.fsdp.loaded")
        return remainder


def _sharded_modules(state: Mapping[str, Any], *, at_least_one: bool) -> list[str]:
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as XlaFSDP

    keys = [k for k, v in state.items() if isinstance(v, Module) and any(isinstance(m, XlaFSDP) for m in v.modules())]
    if len(keys) > 1 or (at_least_one and not keys):
        raise InvalidConfigError(
            f"An `XLAFSDPStrategy` checkpoint holds exactly one model set up with `fabric.setup_module`; the "
            f"state has {len(keys)} ({keys}).",
            argument="state",
            value=sorted(state),
        )
    return keys


def _root(module: Module) -> Any:
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as XlaFSDP

    return next(m for m in module.modules() if isinstance(m, XlaFSDP))


def wrap_policy(policy: Any, checkpointed: Iterable[type[Module]] = ()) -> Callable[..., bool] | None:
    """torch_xla's ``auto_wrap_policy`` for ``policy`` (module classes, or a callable in torch_xla's form).

    Classes whose activations are checkpointed are wrapped as well: the checkpointing wrapper applies to wrapped
    modules only. ``None`` when nothing asks for a wrapper of its own.
    """
    classes = set(policy) if isinstance(policy, (set, frozenset, list, tuple)) else set()
    classes.update(checkpointed)
    if callable(policy) and not classes:
        return policy  # type: ignore[no-any-return]  # a callable in torch_xla's form
    if not classes:
        return None
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy

    # Not transformer-specific despite the name: it wraps instances of the given classes.
    by_class = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes)
    # A callable policy and checkpointed layer classes: wrap what either of them asks for.
    return functools.partial(_either, policy, by_class) if callable(policy) else by_class


def checkpointing_wrapper(classes: Iterable[type[Module]], module: Module, *args: Any, **kwargs: Any) -> Module:
    """torch_xla's ``auto_wrapper_callable`` that recomputes the activations of instances of ``classes``.

    Bind ``classes`` with :func:`functools.partial`; torch_xla passes the rest and builds the wrapper.
    """
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as XlaFSDP
    from torch_xla.distributed.fsdp import checkpoint_module

    if isinstance(module, tuple(classes)):
        module = checkpoint_module(module)
    wrapped: Module = XlaFSDP(module, *args, **kwargs)
    return wrapped


def checkpointing_kwargs(policy: _POLICY_SET | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Add the ``auto_wrapper_callable`` that checkpoints the classes of ``policy`` to the wrapper's ``kwargs``.

    Returns:
        ``kwargs``, changed in place (unchanged for an empty or ``None`` policy).

    Raises:
        InvalidConfigError: ``kwargs`` has its own ``auto_wrapper_callable`` (also a ``ValueError``).
        TypeError: ``policy`` is not a set of classes.
    """
    if not policy:
        return kwargs
    if "auto_wrapper_callable" in kwargs:
        raise InvalidConfigError(
            "You cannot set both `auto_wrapper_callable` and `activation_checkpointing_policy`: `XLAFSDPStrategy` "
            "applies the checkpointing policy through an `auto_wrapper_callable` of its own. Choose one.",
            argument="activation_checkpointing_policy",
            value=policy,
        )
    if not isinstance(policy, set):
        raise TypeError(
            f"`activation_checkpointing_policy` must be a set of module classes, got {policy!r}. To decide per "
            "module otherwise, pass your own `auto_wrapper_callable`."
        )
    kwargs["auto_wrapper_callable"] = functools.partial(checkpointing_wrapper, policy)
    return kwargs


class XLAFSDPBackwardSyncControl(BackwardSyncControl):
    """``fabric.no_backward_sync(model)`` under ``XLAFSDPStrategy``: the wrapper's ``no_sync()``."""

    def no_backward_sync(self, module: Module, enabled: bool) -> contextlib.AbstractContextManager[Any]:
        """Skip the gradient reduce-scatter inside the context (when ``enabled``).

        Raises:
            TypeError: ``module`` is not wrapped in ``XlaFullyShardedDataParallel``.
        """
        if not enabled:
            return contextlib.nullcontext()
        from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as XlaFSDP

        if not isinstance(module, XlaFSDP):
            raise TypeError(
                f"`fabric.no_backward_sync(model)` with `XLAFSDPStrategy` needs the model returned by "
                f"`fabric.setup_module` (an `XlaFullyShardedDataParallel`), got a {type(module).__name__}."
            )
        context: contextlib.AbstractContextManager[Any] = module.no_sync()
        return context


def _auto_wrap_policy_kwargs(policy: _POLICY | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Lightning's form of :func:`wrap_policy`: ``kwargs`` with the ``auto_wrap_policy`` for ``policy`` added."""
    found = wrap_policy(policy)
    if found is not None:
        kwargs["auto_wrap_policy"] = found
    return kwargs


# Lightning's names for the helpers above.
_activation_checkpointing_auto_wrapper: Final = checkpointing_wrapper
_activation_checkpointing_kwargs: Final = checkpointing_kwargs
_XLAFSDPBackwardSyncControl: Final = XLAFSDPBackwardSyncControl


def _either(first: Callable[..., bool], second: Callable[..., bool], **kwargs: Any) -> bool:
    # torch_xla calls a policy with keywords only: module=, recurse=, unwrapped_params=.
    return bool(first(**kwargs) or second(**kwargs))


def _looks_like_optimizer_state(value: Any) -> bool:
    return isinstance(value, dict) and "state" in value and "param_groups" in value
