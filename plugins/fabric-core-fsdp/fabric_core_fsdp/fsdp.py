"""Fully sharded data parallel with FSDP2: parameters, gradients and optimizer state split across processes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Final

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffload,
    FSDPModule,
    MixedPrecision,
    MixedPrecisionPolicy,
    OffloadPolicy,
    ShardingStrategy,
    fully_shard,
)
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.strategies.parallel import check_forwarded_options
from fabric_core.strategies.wiring import ParallelWiring, split_wiring, wired
from fabric_core.utilities.rank_zero import rank_zero_deprecation, rank_zero_warn
from fabric_core_fsdp._fsdp1 import (
    SHARDING_STRATEGIES,
    as_cpu_offload,
    as_mixed_precision,
    cast_buffers,
    fsdp1_policy,
    parse_sharding,
    take_fsdp1_options,
    to_mixed_precision_policy,
    to_offload_policy,
)
from fabric_core_fsdp._fsdp1_calls import guard_fsdp1_calls, refuse_no_sync
from fabric_core_fsdp._sharded import ShardedStrategy
from fabric_core_fsdp._wrapper import checkpoint_activations
from fabric_core_fsdp.precision import FSDPPrecision

__all__ = ["SHARDING_STRATEGIES", "FSDPStrategy"]

#: Names of the two dimensions of a hybrid-sharding mesh.
HYBRID_DIMS: Final = ("replicate", "shard")
Policy = set[type[Module]] | frozenset[type[Module]] | list[type[Module]] | tuple[type[Module], ...]


class _IsInstance:
    """``module -> isinstance(module, classes)``, picklable (spawn pickles the strategy)."""

    def __init__(self, classes: tuple[type[Module], ...]) -> None:
        self.classes = classes

    def __call__(self, module: Module) -> bool:
        return isinstance(module, self.classes)


def _as_predicate(policy: Policy | Callable[[Module], bool] | None, argument: str) -> Callable[[Module], bool] | None:
    if policy is None:
        return None
    if isinstance(policy, (set, frozenset, list, tuple)):
        classes = tuple(policy)
        if not all(isinstance(c, type) and issubclass(c, Module) for c in classes):
            raise InvalidConfigError(
                f"`FSDPStrategy({argument}={policy!r})` must be a set of `torch.nn.Module` classes or a callable "
                "`(module) -> bool`.",
                argument=argument,
                value=policy,
            )
        return _IsInstance(classes)
    translated = fsdp1_policy(policy)  # ModuleWrapPolicy (as Lightning builds it), CustomPolicy, size-based, ...
    if isinstance(translated, tuple):
        return _as_predicate(translated, argument)
    if translated is not None:
        return translated
    if callable(policy):
        return policy
    raise InvalidConfigError(
        f"`FSDPStrategy({argument}={policy!r})` must be a set of `torch.nn.Module` classes or a callable "
        "`(module) -> bool`.",
        argument=argument,
        value=policy,
    )


#: The order of ``FSDPStrategy``'s positional parameters, Lightning's (``FSDP1Strategy`` takes the same).
POSITIONAL_ORDER: Final = (
    "accelerator",
    "parallel_devices",
    "cluster_environment",
    "precision",
    "process_group_backend",
    "timeout",
    "cpu_offload",
    "mixed_precision",
    "auto_wrap_policy",
    "activation_checkpointing",
    "activation_checkpointing_policy",
    "sharding_strategy",
    "state_dict_type",
    "device_mesh",
)
#: How both FSDP strategies' constructors take the arguments every parallel strategy takes: in Lightning's
#: positional order above, with processes started by ``popen`` (see :func:`~fabric_core.strategies.wiring.wired`).
fsdp_wiring: Final = wired(ParallelWiring, positional=POSITIONAL_ORDER, start_method="popen")


class FSDPStrategy(ShardedStrategy):
    """Shards modules with FSDP2 (``torch.distributed.fsdp.fully_shard``) over a device mesh.

    Every submodule matched by ``auto_wrap_policy`` becomes its own FSDP unit (its parameters are gathered
    just for its forward and backward), then the root module takes the rest. Parameters become DTensors
    sharded along dimension 0, so each rank holds ``1 / world_size`` of the parameters, gradients and
    optimizer state. Create the optimizer after ``fabric.setup_module(model)`` (or pass both to
    ``fabric.setup(model, optimizer)``, which points it at the shards).

    Args:
        auto_wrap_policy: Module classes (a set) or a predicate ``(module) -> bool`` choosing the submodules
            sharded as their own units (typically the transformer block). ``None``: only the root.
        reshard_after_forward: ``True`` frees gathered parameters after forward (least memory, ZeRO-3);
            ``False`` keeps them until backward (ZeRO-2-like, less communication). Unless it is passed as
            ``True``, the root module keeps its own gathered parameters from forward to backward, which
            needs them first (FSDP2's default for the root, and what FSDP1's ``FULL_SHARD`` did).
        sharding_strategy: Lightning's (FSDP1) names, any case, or torch's ``ShardingStrategy``:
            ``"FULL_SHARD"`` (reshard after forward), ``"SHARD_GRAD_OP"`` (keep gathered parameters until
            backward), ``"NO_SHARD"`` (whole parameters on every rank, gradients all-reduced: a
            ``(world_size, 1)`` mesh), ``"HYBRID_SHARD"`` / ``"_HYBRID_SHARD_ZERO2"`` (shard within a node,
            replicate across nodes: a ``(replicate, shard)`` mesh).
        device_mesh: A ``(replicate, shard)`` tuple or a ``DeviceMesh``: a 2-D mesh shards within groups of
            ``shard`` ranks and replicates across them (hybrid sharding). Hybrid strategies default to
            ``(num_nodes, devices per node)``. On a mesh with replicas, rank 0's parameters and buffers are
            broadcast before sharding so that the replicas start equal.
        activation_checkpointing_policy: Module classes (or a predicate) whose activations are recomputed in
            backward instead of stored.
        activation_checkpointing: Deprecated (as in Lightning): a class or list of classes; use
            ``activation_checkpointing_policy``.
        state_dict_type: ``"sharded"`` (a folder, loadable by any number of processes) or ``"full"`` (one
            file written by rank 0).
        cpu_offload: Keep parameters, gradients and optimizer state in CPU memory: ``True``, torch's (FSDP1)
            ``CPUOffload(offload_params=True)`` or FSDP2's ``CPUOffloadPolicy``. Needs an accelerator: FSDP2
            pins host memory for the copies.
        mixed_precision: torch's (FSDP1) ``MixedPrecision`` (its ``buffer_dtype`` is applied by casting the
            module's floating-point buffers at setup) or FSDP2's ``MixedPrecisionPolicy``; replaces the
            policy the precision plugin gives.
        **fully_shard_kwargs: The wiring of every parallel strategy (``accelerator``, ..., ``timeout``; see
            :class:`~fabric_core.strategies.parallel.ParallelStrategy`), with ``start_method`` ``"popen"``
            (``fsdp``: the script runs again per device, the default), or ``"spawn"``/``"fork"``/``"forkserver"``
            (``fabric.launch(fn)`` runs ``fn`` in new processes). The other keywords are more arguments
            for every ``fully_shard`` call (e.g. ``shard_placement_fn``), or
            Lightning's ``FullyShardedDataParallel`` arguments: ``sync_module_states=True`` broadcasts rank 0's
            module before sharding; ``ignored_modules``/``ignored_states`` become ``ignored_params``;
            ``backward_prefetch``, ``forward_prefetch``, ``limit_all_gathers`` and ``use_orig_params=True``
            change nothing under FSDP2 and are accepted; ``use_orig_params=False``, ``param_init_fn``,
            ``process_group`` and ``device_id`` are refused with what to use instead.

    Raises:
        InvalidConfigError: Unknown or contradictory options, FSDP1 options FSDP2 cannot express (also a
            ``ValueError``); ``cpu_offload`` on the CPU accelerator.
        UnknownShardingStrategyError: An unknown ``sharding_strategy`` name (also a ``KeyError``).
    """

    model_kind: ClassVar[str] = "FSDP"

    @fsdp_wiring
    def __init__(
        self,
        auto_wrap_policy: Policy | Callable[[Module], bool] | None = None,
        reshard_after_forward: bool | None = None,
        sharding_strategy: Any = None,
        device_mesh: tuple[int, ...] | DeviceMesh | None = None,
        activation_checkpointing_policy: Policy | Callable[[Module], bool] | None = None,
        activation_checkpointing: type[Module] | list[type[Module]] | None = None,
        state_dict_type: str = "sharded",
        cpu_offload: bool | CPUOffload | OffloadPolicy | None = None,
        mixed_precision: MixedPrecision | MixedPrecisionPolicy | None = None,
        **fully_shard_kwargs: Any,
    ) -> None:
        wiring, fully_shard_kwargs = split_wiring(fully_shard_kwargs)
        super().__init__(state_dict_type=state_dict_type, **wiring)
        for reserved in ("mesh", "mp_policy", "offload_policy"):
            if reserved in fully_shard_kwargs:
                raise InvalidConfigError(
                    f"`FSDPStrategy({reserved}=...)`: the strategy sets `{reserved}` itself; use `device_mesh=`, "
                    "`mixed_precision=` or `cpu_offload=` instead.",
                    argument=reserved,
                    value=fully_shard_kwargs[reserved],
                )
        self._wrap_policy = _as_predicate(auto_wrap_policy, "auto_wrap_policy")
        if activation_checkpointing is not None:
            if activation_checkpointing_policy is not None:
                raise InvalidConfigError(
                    "You cannot set both `activation_checkpointing` and `activation_checkpointing_policy`. Use the "
                    "latter.",
                    argument="activation_checkpointing",
                    value=activation_checkpointing,
                )
            classes = (
                activation_checkpointing if isinstance(activation_checkpointing, list) else [activation_checkpointing]
            )
            rank_zero_deprecation(
                f"`FSDPStrategy(activation_checkpointing={activation_checkpointing!r})` is deprecated, use "
                f"`FSDPStrategy(activation_checkpointing_policy={set(classes)!r})` instead."
            )
            activation_checkpointing_policy = set(classes)
        self._checkpointing_policy = _as_predicate(activation_checkpointing_policy, "activation_checkpointing_policy")
        self._sharding = parse_sharding(sharding_strategy, reshard_after_forward)
        self._reshard_after_forward = self._sharding.reshard_after_forward
        # The root's setting: re-gathering its parameters at the start of backward only adds communication.
        self._reshard_root = reshard_after_forward is True
        if isinstance(device_mesh, tuple) and not (
            len(device_mesh) in (1, 2) and all(isinstance(n, int) and n > 0 for n in device_mesh)
        ):
            raise InvalidConfigError(
                f"`FSDPStrategy(device_mesh={device_mesh!r})` must be `(shard,)`, `(replicate, shard)` with positive "
                "sizes, or a `DeviceMesh`.",
                argument="device_mesh",
                value=device_mesh,
            )
        if self._sharding.layout == "replicate" and device_mesh is not None:
            raise InvalidConfigError(
                f"`FSDPStrategy(sharding_strategy='NO_SHARD', device_mesh={device_mesh!r})` contradict each other: "
                "NO_SHARD replicates the whole model on every rank. Drop `device_mesh`, or use "
                "`sharding_strategy='HYBRID_SHARD'` to shard within groups of ranks.",
                argument="device_mesh",
                value=device_mesh,
            )
        self._mesh_spec = device_mesh
        self._offload = to_offload_policy(cpu_offload)
        self._mixed_precision = mixed_precision
        self._mp_policy, self._buffer_dtype = to_mixed_precision_policy(mixed_precision)
        # Lightning's FullyShardedDataParallel arguments: translated, accepted as no-ops, or refused.
        implied = take_fsdp1_options(fully_shard_kwargs)
        self._sync_module_states: bool = implied.pop("sync_module_states", False)
        check_forwarded_options(
            type(self), fully_shard_kwargs, fully_shard, reserved=("mesh", "mp_policy", "offload_policy")
        )
        self._fully_shard_kwargs = {**fully_shard_kwargs, **implied}

    @property
    def reshard_after_forward(self) -> bool:
        return self._reshard_after_forward

    @property
    def sharding_strategy(self) -> ShardingStrategy:
        """The sharding as torch's (FSDP1) ``ShardingStrategy``, as Lightning's strategy reports it."""
        return self._sharding.strategy

    @property
    def cpu_offload(self) -> CPUOffload:
        """Whether parameters live in CPU memory, as torch's (FSDP1) ``CPUOffload``, as Lightning reports it."""
        return as_cpu_offload(self._offload)

    @property
    def mixed_precision(self) -> MixedPrecision | MixedPrecisionPolicy | None:
        """The ``mixed_precision`` argument, as it was passed."""
        return self._mixed_precision

    @property
    def mixed_precision_config(self) -> MixedPrecision | None:
        """The dtypes in use, as torch's (FSDP1) ``MixedPrecision``: the argument's, else the precision plugin's."""
        if isinstance(self._mixed_precision, MixedPrecision):
            return self._mixed_precision
        if self._mp_policy is not None:
            return as_mixed_precision(self._mp_policy)
        precision = self.precision
        if isinstance(precision, FSDPPrecision):
            # What FSDP2 runs: the mixed precisions reduce gradients in float32, not as Lightning's FSDP1 config.
            policy = precision.mixed_precision_policy
            return as_mixed_precision(policy) if policy is not None else precision.mixed_precision_config
        if getattr(precision, "precision", None) == "32-true":
            return MixedPrecision(param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
        return None

    @property
    def mixed_precision_policy(self) -> MixedPrecisionPolicy | None:
        """The policy given to ``fully_shard``: the one passed, else the FSDP precision plugin's."""
        if self._mp_policy is not None:
            return self._mp_policy
        precision = self.precision
        return precision.mixed_precision_policy if isinstance(precision, FSDPPrecision) else None

    def module_sharded_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context modules are created in to be sharded later: with FSDP2 one that changes nothing.

        Lightning's (FSDP1) context enables ``wrap()`` with the strategy's wrapper class and options; FSDP2 has no
        wrapper class, :meth:`setup_module` applies ``fully_shard`` to the finished model, so a model created
        inside is an ordinary one, as in Lightning without ``wrap()`` calls. To create it without memory, use
        ``fabric.init_module(empty_init=True)``.
        """
        return contextlib.nullcontext()

    def configure_launcher(self) -> None:
        """Refuse CPU offload on the CPU accelerator, then pick the launcher as DDP does."""
        accelerator = self.accelerator
        if self._offload is not None and accelerator is not None and accelerator.device_type == "cpu":
            raise InvalidConfigError(
                "`Fabric(accelerator='cpu', strategy='fsdp_cpu_offload')` (or `FSDPStrategy(cpu_offload=True)`) cannot "
                "run: FSDP2's CPU offload pins host memory for copies to and from an accelerator, and on a machine "
                "without one it fails with 'Cannot access accelerator device when none is available'. On the CPU the "
                "parameters are in CPU memory already: use `strategy='fsdp'`.",
                argument="strategy",
                value="fsdp_cpu_offload",
            )
        super().configure_launcher()

    def setup_environment(self) -> None:
        """Join the process group, then build the device mesh."""
        super().setup_environment()
        self._device_mesh = self._build_mesh()

    def _build_mesh(self) -> DeviceMesh:
        spec = self._mesh_spec
        if isinstance(spec, DeviceMesh):
            return spec
        device_type = self.root_device.type
        layout = self._sharding.layout
        if spec is None:
            if layout == "replicate":
                spec = (self.world_size, 1)
            else:
                spec = (self.num_nodes, self.num_processes) if layout == "hybrid" else (self.world_size,)
        if len(spec) == 1 and layout == "hybrid":
            spec = (self.world_size // spec[0], spec[0])
        size = 1
        for n in spec:
            size *= n
        if size != self.world_size:
            raise InvalidConfigError(
                f"`FSDPStrategy(device_mesh={spec!r})` has {size} ranks but the job has {self.world_size} "
                f"({self.num_nodes} node(s) x {self.num_processes} device(s)); the sizes must multiply to it.",
                argument="device_mesh",
                value=spec,
            )
        if len(spec) == 2:
            return init_device_mesh(device_type, tuple(spec), mesh_dim_names=HYBRID_DIMS)
        return init_device_mesh(device_type, tuple(spec))

    # -- sharding ------------------------------------------------------------------------------------------
    def shard_module(self, module: Module) -> Module:
        """Apply activation checkpointing, then ``fully_shard`` to the policy's submodules and the root.

        A module that already contains FSDP modules (sharded by the user) is left as it is.
        """
        guard_fsdp1_calls()
        if any(isinstance(m, FSDPModule) for m in module.modules()):
            if self._wrap_policy is not None:
                rank_zero_warn(
                    "The model is already sharded with `fully_shard`; `FSDPStrategy(auto_wrap_policy=...)` is ignored."
                )
            return module
        if self._buffer_dtype is not None:
            cast_buffers(module, self._buffer_dtype)
        mesh = self.device_mesh
        if self._sync_module_states or (mesh.ndim == 2 and mesh.size(0) > 1):
            # Replicas must start equal (as DDP makes them): FSDP2 keeps each rank's own copy on a replicate
            # dimension, and shards each rank's own tensors on a shard dimension.
            _broadcast_from_rank_zero(module)
        if self._checkpointing_policy is not None:
            checkpoint_activations(module, {"check_fn": self._checkpointing_policy})
        kwargs: dict[str, Any] = {
            "mesh": mesh,
            "reshard_after_forward": self._reshard_after_forward,
            **self._fully_shard_kwargs,
        }
        if self.mixed_precision_policy is not None:
            kwargs["mp_policy"] = self.mixed_precision_policy
        if self._offload is not None:
            kwargs["offload_policy"] = self._offload
        if self._wrap_policy is not None:
            # Children before parents (fully_shard on a parent takes only parameters no child unit holds),
            # siblings in their order, as a hand-written `for block in model.blocks: fully_shard(block)`.
            for sub in _post_order(module):
                if sub is not module and self._wrap_policy(sub):
                    fully_shard(sub, **kwargs)
        fully_shard(module, **{**kwargs, "reshard_after_forward": self._reshard_root})
        refuse_no_sync(module)
        return module


def _post_order(module: Module, seen: set[int] | None = None) -> Iterator[Module]:
    """``module`` and its submodules once each (as ``modules()``), every one after its children, siblings in order."""
    seen = set() if seen is None else seen
    seen.add(id(module))
    for child in module.children():
        if id(child) not in seen:
            yield from _post_order(child, seen)
    yield module


def _broadcast_from_rank_zero(module: Module) -> None:
    """Give every rank global rank 0's parameters and buffers (not possible for those still on the meta device)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() < 2:
        return
    with torch.no_grad():
        for tensor in (*module.parameters(), *module.buffers()):
            if not tensor.is_meta:
                torch.distributed.broadcast(tensor.data, src=0)


# Lightning's private names at its ``strategies.fsdp`` path, which this module backs.
from fabric_core_fsdp._lightning_fsdp import *  # noqa: E402, F403
