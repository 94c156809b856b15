"""Fully sharded data parallel with FSDP1 (``FullyShardedDataParallel``), for code that calls FSDP1's API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.amp import GradScaler
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel, MixedPrecision, ShardingStrategy
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import ArgumentTypeError, InvalidConfigError
from fabric_core.io.weights.pieces import Piece, persistent_targets
from fabric_core.strategies.parallel import check_forwarded_options
from fabric_core.strategies.wiring import split_wiring
from fabric_core.utilities.rank_zero import rank_zero_warn
from fabric_core_fsdp._fsdp1 import parse_sharding
from fabric_core_fsdp._sharded import ShardedStrategy, move_metrics_to_device
from fabric_core_fsdp._wrapper import (
    FSDP1BackwardSyncControl,
    check_group_or_mesh,
    checkpoint_activations,
    checkpointing_selection,
    fsdp1_cpu_offload,
    has_flat_params,
    has_fsdp1_units,
    keep_state_dicts_on_cpu_devices,
    lightning_mixed_precision,
    summoned,
    wrap_policy,
)
from fabric_core_fsdp.fsdp import FSDPStrategy, fsdp_wiring
from fabric_core_fsdp.precision import FSDPPrecision

__all__ = ["FSDP1Strategy"]

#: Arguments of ``FullyShardedDataParallel`` the strategy passes itself.
_RESERVED = ("module", "cpu_offload", "mixed_precision", "sharding_strategy", "device_id", "device_mesh")


class FSDP1Strategy(FSDPStrategy):
    """Wraps modules in FSDP1's ``FullyShardedDataParallel``, as Lightning Fabric's ``FSDPStrategy`` does.

    Choose it (``strategy="fsdp1"`` or ``FSDP1Strategy(...)``) for code that calls FSDP1's API on the model:
    ``FSDP.state_dict_type(model, ...)``, ``FSDP.summon_full_params(model)``, ``model._forward_module.no_sync()``,
    ``FSDP.optim_state_dict(...)``. Otherwise prefer :class:`~fabric_core_fsdp.FSDPStrategy` (FSDP2), which
    torch develops further. It is an ``FSDPStrategy``, so ``isinstance`` checks written for Lightning hold.

    ``fabric.setup_module`` wraps the model in a ``FullyShardedDataParallel`` root (nested units from
    ``auto_wrap_policy``); the model Fabric returns runs through it, and ``model._forward_module`` is it.
    Parameters stay the original ``Parameter`` objects (``use_orig_params=True`` by default), so an optimizer
    created before ``setup`` keeps working. ``fabric.save``/``fabric.load`` write and read the same sharded
    folders and full files as the FSDP2 strategy.

    Args:
        auto_wrap_policy: Module classes (a set), an FSDP1 policy (``ModuleWrapPolicy``, ``CustomPolicy``,
            ``size_based_auto_wrap_policy``, ``partial(transformer_auto_wrap_policy, ...)``) or a predicate
            ``(module) -> bool``: the submodules wrapped as their own units.
        activation_checkpointing: Deprecated (as in Lightning): a class or list of classes.
        activation_checkpointing_policy: The same forms as ``auto_wrap_policy``: the submodules whose activations
            are recomputed in backward.
        sharding_strategy: ``"FULL_SHARD"`` (default), ``"SHARD_GRAD_OP"``, ``"NO_SHARD"``, ``"HYBRID_SHARD"``,
            ``"_HYBRID_SHARD_ZERO2"`` (any case) or torch's ``ShardingStrategy``.
        state_dict_type: ``"sharded"`` (a folder) or ``"full"`` (one file written by rank 0).
        device_mesh: ``(replicate, shard)`` sizes or a ``DeviceMesh``, for the hybrid strategies; they default to
            ``(num_nodes, devices per node)``.
        cpu_offload: ``True`` or torch's ``CPUOffload(offload_params=True)``: parameters and gradients in CPU
            memory between uses (needs an accelerator).
        mixed_precision: torch's ``MixedPrecision``; by default the precision plugin's, with Lightning's dtypes
            (``"bf16-mixed"``: parameters gathered, gradients reduced and buffers kept in bf16).
        **kwargs: The wiring of every parallel strategy (``accelerator``, ..., ``timeout``, ``start_method``),
            and any other ``FullyShardedDataParallel`` argument (``use_orig_params`` (default ``True``),
            ``sync_module_states``, ``limit_all_gathers``, ``backward_prefetch``, ``forward_prefetch``,
            ``ignored_modules``, ``process_group``, ``param_init_fn``, ...).

    Raises:
        InvalidConfigError: An unknown ``state_dict_type``, a policy of the wrong form, ``process_group`` with
            ``device_mesh``, an FSDP2 ``MixedPrecisionPolicy`` or offload policy (also ``ValueError``s).
        UnknownOptionError: A keyword ``FullyShardedDataParallel`` does not take (also a ``TypeError``).
        UnknownShardingStrategyError: An unknown ``sharding_strategy`` name (also a ``KeyError``).
    """

    @fsdp_wiring
    def __init__(
        self,
        auto_wrap_policy: Any = None,
        activation_checkpointing: type[Module] | list[type[Module]] | None = None,
        activation_checkpointing_policy: Any = None,
        sharding_strategy: str | ShardingStrategy = "FULL_SHARD",
        state_dict_type: str = "sharded",
        device_mesh: tuple[int, ...] | DeviceMesh | None = None,
        cpu_offload: bool | CPUOffload | None = None,
        mixed_precision: MixedPrecision | None = None,
        **kwargs: Any,
    ) -> None:
        wiring, fsdp_kwargs = split_wiring(kwargs)
        # FSDPStrategy's constructor translates FSDP1 options into FSDP2 settings: here they stay as they are.
        ShardedStrategy.__init__(self, state_dict_type=state_dict_type, **wiring)
        self._backward_sync_control = FSDP1BackwardSyncControl()
        if "device_id" in fsdp_kwargs:
            raise ArgumentTypeError(
                f"`FSDP1Strategy(device_id={fsdp_kwargs['device_id']!r})`: the strategy passes each rank's device "
                "itself (`fabric.device`); choose devices with `Fabric(devices=...)`.",
                argument="device_id",
                value=fsdp_kwargs["device_id"],
            )
        check_forwarded_options(type(self), fsdp_kwargs, FullyShardedDataParallel, reserved=_RESERVED)
        check_group_or_mesh({**fsdp_kwargs, "device_mesh": device_mesh}, type(self).__name__)
        self._fsdp_kwargs: dict[str, Any] = {"use_orig_params": True, **fsdp_kwargs}
        policy = wrap_policy(auto_wrap_policy, "auto_wrap_policy")
        if policy is not None:
            self._fsdp_kwargs["auto_wrap_policy"] = policy
        self._checkpointing = checkpointing_selection(activation_checkpointing, activation_checkpointing_policy)
        self._sharding = parse_sharding(sharding_strategy, None)
        self._mesh_spec = device_mesh
        self._cpu_offload = fsdp1_cpu_offload(cpu_offload)
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecision):
            raise InvalidConfigError(
                f"`FSDP1Strategy(mixed_precision={mixed_precision!r})` must be torch's (FSDP1) `MixedPrecision`; "
                "an FSDP2 `MixedPrecisionPolicy` belongs to `strategy='fsdp'`.",
                argument="mixed_precision",
                value=mixed_precision,
            )
        self._mixed_precision = mixed_precision

    # -- what Lightning's strategy reports -------------------------------------------------------------------
    @property
    def reshard_after_forward(self) -> bool:
        return self._sharding.strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD)

    @property
    def cpu_offload(self) -> CPUOffload:
        """The ``CPUOffload`` every unit is wrapped with."""
        return self._cpu_offload

    @property
    def mixed_precision_config(self) -> MixedPrecision | None:
        """The ``mixed_precision`` argument, else Lightning's dtypes for the precision plugin's precision."""
        if isinstance(self._mixed_precision, MixedPrecision):
            return self._mixed_precision
        return lightning_mixed_precision(getattr(self.precision, "precision", None))

    @property
    def mixed_precision_policy(self) -> None:
        """``None``: FSDP1 takes :attr:`mixed_precision_config` instead of an FSDP2 policy."""
        return None

    # -- processes -----------------------------------------------------------------------------------------
    def configure_launcher(self) -> None:
        """Refuse CPU offload on the CPU accelerator, then pick the launcher as DDP does."""
        accelerator = self.accelerator
        if self._cpu_offload.offload_params and accelerator is not None and accelerator.device_type == "cpu":
            raise InvalidConfigError(
                "`FSDP1Strategy(cpu_offload=True)` with `accelerator='cpu'`: CPU offload moves parameters between an "
                "accelerator and CPU memory; on the CPU they are in CPU memory already. Drop `cpu_offload`.",
                argument="cpu_offload",
                value=self._cpu_offload,
            )
        ShardedStrategy.configure_launcher(self)

    def setup_environment(self) -> None:
        """Join the process group; build the mesh of a hybrid strategy, or the one ``device_mesh`` asks for.

        FSDP1 takes a 2-D mesh for the hybrid strategies; the others run over the default process group.
        """
        ShardedStrategy.setup_environment(self)
        hybrid = self._sharding.layout == "hybrid" and self._fsdp_kwargs.get("process_group") is None
        if hybrid or self._mesh_spec is not None:
            self._device_mesh = self._build_mesh()

    # -- modules and optimizers ----------------------------------------------------------------------------
    def module_sharded_context(self) -> contextlib.AbstractContextManager[Any]:
        """A context in which ``torch.distributed.fsdp.wrap.wrap(submodule)`` wraps with this strategy's options."""
        from torch.distributed.fsdp.wrap import enable_wrap

        return enable_wrap(wrapper_cls=FullyShardedDataParallel, **self._wrapper_kwargs())

    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """As the FSDP2 strategy's, and ``wrap()`` calls inside wrap with this strategy's options."""
        stack = contextlib.ExitStack()
        stack.enter_context(super().module_init_context(empty_init))
        stack.enter_context(self.module_sharded_context())
        return stack

    def _wrapper_kwargs(self) -> dict[str, Any]:
        kwargs = {
            "cpu_offload": self._cpu_offload,
            "mixed_precision": self.mixed_precision_config,
            "sharding_strategy": self._sharding.strategy,
            "device_id": self.root_device,
            **self._fsdp_kwargs,
        }
        if self._device_mesh is not None:
            kwargs["device_mesh"] = self._device_mesh
        return kwargs

    def shard_module(self, module: Module) -> Module:
        """Wrap ``module`` in ``FullyShardedDataParallel`` (unless it holds FSDP1 units already), then checkpoint.

        Modules created on the meta device are materialised by FSDP1 itself, unit by unit, with
        ``reset_parameters()``.
        """
        self._use_sharded_scaler()
        if has_fsdp1_units(module):
            if any(t.is_meta for t in (*module.parameters(), *module.buffers())):
                rank_zero_warn(
                    "The model is already wrapped in `FSDP` but there are still parameters on the meta device."
                )
            if "auto_wrap_policy" in self._fsdp_kwargs:
                rank_zero_warn(
                    "A FSDP `auto_wrap_policy` is set, but the model is already wrapped. The policy will be ignored."
                )
                del self._fsdp_kwargs["auto_wrap_policy"]
        else:
            module = FullyShardedDataParallel(module, **self._wrapper_kwargs())
        move_metrics_to_device(module, self.root_device)
        checkpoint_activations(module, self._checkpointing)
        keep_state_dicts_on_cpu_devices(module)
        return module

    def setup_module(self, module: Module) -> Module:
        """Wrap ``module`` in ``FullyShardedDataParallel`` and remember it (for checkpoints and gathering)."""
        return self._set_up(self.shard_module(module))

    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        """Wrap the module; optimizers keep their parameters, which FSDP1 keeps as they were (``use_orig_params``).

        Raises:
            InvalidConfigError: ``use_orig_params=False``, under which FSDP1 replaces the parameters.
        """
        if self._fsdp_kwargs.get("use_orig_params") is False:
            raise InvalidConfigError(
                f"You set `{type(self).__name__}(use_orig_params=False)` but this is not supported when setting the "
                "model and optimizer up jointly. Either set it to `True` or set the objects up in this order: create "
                "the model, call `setup_module`, create the optimizer, call `setup_optimizer`.",
                argument="use_orig_params",
                value=False,
            )
        module = self.setup_module(module)
        return module, [self.setup_optimizer(o) for o in optimizers], scheduler

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """With ``use_orig_params=False``, check that the optimizer holds FSDP1's flat parameters.

        Raises:
            InvalidConfigError: It holds none (it was created before the model was set up).
        """
        if self._fsdp_kwargs.get("use_orig_params"):
            return optimizer
        if not has_flat_params(optimizer):
            raise InvalidConfigError(
                "The optimizer does not seem to reference any FSDP parameters. HINT: Make sure to create the optimizer "
                "after setting up the model.",
                argument="optimizer",
            )
        return optimizer

    def _use_sharded_scaler(self) -> None:
        """Under ``16-mixed``, a plain ``GradScaler`` becomes FSDP1's ``ShardedGradScaler``.

        FSDP1's gradients are plain tensors, each rank's shard: only the sharded scaler agrees across ranks on
        whether a step overflowed.
        """
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        precision = self.precision
        scaler = getattr(precision, "scaler", None)
        if isinstance(precision, FSDPPrecision) and type(scaler) is GradScaler:
            precision.init_scaling(ShardedGradScaler(precision.device))

    # -- gradients and gathering -----------------------------------------------------------------------------
    def _clip_norm(
        self, module: Module, optimizer: Optimizer, max_norm: float, norm_type: float, error_if_nonfinite: bool
    ) -> Tensor:
        """Clip by the norm of the whole (unsharded) gradient with the root's ``clip_grad_norm_``; return the norm.

        Raises:
            TypeError: ``module`` is not the ``FullyShardedDataParallel`` root.
            RuntimeError: The norm is not finite and ``error_if_nonfinite`` (the gradients were scaled by it).
        """
        if not isinstance(module, FullyShardedDataParallel):
            raise TypeError(
                "Gradient clipping with FSDP is only possible if the module passed to "
                f"`{type(self).__name__}.clip_gradients_norm` is wrapped in `FullyShardedDataParallel`. "
                f"Got: {type(module).__name__}."
            )
        norm = module.clip_grad_norm_(max_norm=max_norm, norm_type=norm_type)
        if error_if_nonfinite and not bool(torch.isfinite(norm)):
            raise RuntimeError(
                f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite. To "
                "disable this error, set `error_if_nonfinite=False`"
            )
        return norm

    def gathered_parameters(
        self, params: Iterable[Tensor], modifier_rank: int | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """``summon_full_params`` on the set-up roots holding ``params``; ``modifier_rank``'s edits are kept."""
        return summoned(self.modules, params, modifier_rank)

    @contextlib.contextmanager
    def weights_to_load(self, module: Module) -> Iterator[list[Piece]]:
        """The whole parameters (``summon_full_params``, written back on exit) and persistent buffers.

        FSDP1 keeps a module's parameters in flat shards that no weight name maps onto a byte range of, so each
        rank holds the whole module while loading safetensors (FSDP2 reads only its shards).
        """
        with FullyShardedDataParallel.summon_full_params(module, writeback=True):
            yield persistent_targets(module)
