"""Fully sharded data parallel with FSDP2: parameters, gradients and optimizer state split across processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.strategies.parallel import DEFAULT_PG_TIMEOUT, check_forwarded_options
from fabric_core.utilities.rank_zero import rank_zero_warn
from fabric_core_fsdp._sharded import ShardedStrategy
from fabric_core_fsdp.precision import FSDPPrecision

if TYPE_CHECKING:
    from fabric_core.accelerators.accelerator import Accelerator
    from fabric_core.environments.environment import ClusterEnvironment
    from fabric_core.io.checkpoint_io import CheckpointIO
    from fabric_core.precision.precision import Precision

__all__ = ["SHARDING_STRATEGIES", "FSDPStrategy"]

#: sharding_strategy -> (reshard_after_forward, hybrid). Hybrid shards within a node and replicates across.
SHARDING_STRATEGIES: Final[dict[str, tuple[bool, bool]]] = {
    "FULL_SHARD": (True, False),
    "SHARD_GRAD_OP": (False, False),
    "HYBRID_SHARD": (True, True),
    "_HYBRID_SHARD_ZERO2": (False, True),
}
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
    if callable(policy):
        return policy
    raise InvalidConfigError(
        f"`FSDPStrategy({argument}={policy!r})` must be a set of `torch.nn.Module` classes or a callable "
        "`(module) -> bool`.",
        argument=argument,
        value=policy,
    )


def _parse_sharding(sharding_strategy: Any, reshard_after_forward: bool | None) -> tuple[bool, bool]:
    if sharding_strategy is None:
        return (True if reshard_after_forward is None else reshard_after_forward), False
    name = getattr(sharding_strategy, "name", sharding_strategy)  # also torch's FSDP1 ShardingStrategy enum
    key = str(name).upper()
    if key not in SHARDING_STRATEGIES:
        raise InvalidConfigError(
            f"`FSDPStrategy(sharding_strategy={sharding_strategy!r})` is not supported. "
            f"Valid choices: {', '.join(repr(s) for s in SHARDING_STRATEGIES)}.",
            argument="sharding_strategy",
            value=sharding_strategy,
        )
    reshard, hybrid = SHARDING_STRATEGIES[key]
    if reshard_after_forward is not None and reshard_after_forward != reshard:
        raise InvalidConfigError(
            f"`FSDPStrategy(sharding_strategy={key!r}, reshard_after_forward={reshard_after_forward!r})` contradict "
            f"each other: {key!r} means reshard_after_forward={reshard}. Pass one of them.",
            argument="reshard_after_forward",
            value=reshard_after_forward,
        )
    return reshard, hybrid


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
        sharding_strategy: Lightning's spelling of the same: ``"FULL_SHARD"``, ``"SHARD_GRAD_OP"``,
            ``"HYBRID_SHARD"`` or ``"_HYBRID_SHARD_ZERO2"`` (also torch's ``ShardingStrategy`` enum).
        device_mesh: A ``(replicate, shard)`` tuple or a ``DeviceMesh``: a 2-D mesh shards within groups of
            ``shard`` ranks and replicates across them (hybrid sharding). Hybrid strategies default to
            ``(num_nodes, devices per node)``.
        activation_checkpointing_policy: Module classes (or a predicate) whose activations are recomputed in
            backward instead of stored.
        state_dict_type: ``"sharded"`` (a folder, loadable by any number of processes) or ``"full"`` (one
            file written by rank 0).
        cpu_offload: Keep parameters, gradients and optimizer state in CPU memory (``True`` or a
            ``CPUOffloadPolicy``). Needs an accelerator: FSDP2 pins host memory for the copies.
        mixed_precision: A ``MixedPrecisionPolicy`` that replaces the one the precision plugin gives.
        start_method: ``"popen"`` (``fsdp``: the script runs again per device), or ``"spawn"``/``"fork"``/
            ``"forkserver"`` (``fabric.launch(fn)`` runs ``fn`` in new processes).
        **fully_shard_kwargs: More arguments for every ``fully_shard`` call (e.g. ``shard_placement_fn``).
        Others: as for :class:`~fabric_core.strategies.parallel.ParallelStrategy`.

    Raises:
        InvalidConfigError: Unknown or contradictory options; ``cpu_offload`` on the CPU accelerator.
    """

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironment | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta = DEFAULT_PG_TIMEOUT,
        start_method: str = "popen",
        auto_wrap_policy: Policy | Callable[[Module], bool] | None = None,
        reshard_after_forward: bool | None = None,
        sharding_strategy: Any = None,
        device_mesh: tuple[int, ...] | DeviceMesh | None = None,
        activation_checkpointing_policy: Policy | Callable[[Module], bool] | None = None,
        state_dict_type: str = "sharded",
        cpu_offload: bool | OffloadPolicy = False,
        mixed_precision: MixedPrecisionPolicy | None = None,
        **fully_shard_kwargs: Any,
    ) -> None:
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io,
            precision=precision,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
            state_dict_type=state_dict_type,
        )
        for reserved in ("mesh", "mp_policy", "offload_policy"):
            if reserved in fully_shard_kwargs:
                raise InvalidConfigError(
                    f"`FSDPStrategy({reserved}=...)`: the strategy sets `{reserved}` itself; use `device_mesh=`, "
                    "`mixed_precision=` or `cpu_offload=` instead.",
                    argument=reserved,
                    value=fully_shard_kwargs[reserved],
                )
        self._wrap_policy = _as_predicate(auto_wrap_policy, "auto_wrap_policy")
        self._checkpointing_policy = _as_predicate(activation_checkpointing_policy, "activation_checkpointing_policy")
        self._reshard_after_forward, hybrid = _parse_sharding(sharding_strategy, reshard_after_forward)
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
        self._mesh_spec = device_mesh
        self._hybrid = hybrid
        if cpu_offload is True:
            self._offload: OffloadPolicy | None = CPUOffloadPolicy()
        elif isinstance(cpu_offload, OffloadPolicy):
            self._offload = cpu_offload
        else:
            self._offload = None
        self._mixed_precision = mixed_precision
        check_forwarded_options(
            type(self), fully_shard_kwargs, fully_shard, reserved=("mesh", "mp_policy", "offload_policy")
        )
        self._fully_shard_kwargs = fully_shard_kwargs

    @property
    def reshard_after_forward(self) -> bool:
        return self._reshard_after_forward

    @property
    def cpu_offload(self) -> bool:
        return isinstance(self._offload, CPUOffloadPolicy)

    @property
    def mixed_precision_policy(self) -> MixedPrecisionPolicy | None:
        """The policy given to ``fully_shard``: the one passed, else the FSDP precision plugin's."""
        if self._mixed_precision is not None:
            return self._mixed_precision
        precision = self.precision
        return precision.mixed_precision_policy if isinstance(precision, FSDPPrecision) else None

    def configure_launcher(self) -> None:
        """Refuse CPU offload on the CPU accelerator, then pick the launcher as DDP does."""
        accelerator = self.accelerator
        if self.cpu_offload and accelerator is not None and accelerator.device_type == "cpu":
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
        if spec is None:
            spec = (self.num_nodes, self.num_processes) if self._hybrid else (self.world_size,)
        if len(spec) == 1 and self._hybrid:
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
        if any(isinstance(m, FSDPModule) for m in module.modules()):
            if self._wrap_policy is not None:
                rank_zero_warn(
                    "The model is already sharded with `fully_shard`; `FSDPStrategy(auto_wrap_policy=...)` is ignored."
                )
            return module
        if self._checkpointing_policy is not None:
            _checkpoint_activations(module, self._checkpointing_policy)
        kwargs: dict[str, Any] = {
            "mesh": self.device_mesh,
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
        return module


def _post_order(module: Module, seen: set[int] | None = None) -> Iterator[Module]:
    """``module`` and its submodules once each (as ``modules()``), every one after its children, siblings in order."""
    seen = set() if seen is None else seen
    seen.add(id(module))
    for child in module.children():
        if id(child) not in seen:
            yield from _post_order(child, seen)
    yield module


def _checkpoint_activations(module: Module, policy: Callable[[Module], bool]) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    apply_activation_checkpointing(module, checkpoint_wrapper_fn=checkpoint_wrapper, check_fn=policy)
