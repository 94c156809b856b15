"""Lightning's FSDP1-style arguments (``FullyShardedDataParallel``'s) translated to FSDP2 (``fully_shard``).

Each FSDP1 option either maps onto an FSDP2 setting, is accepted because it changes nothing under FSDP2
(said why next to it), or is refused with an error naming what to use instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import torch
from torch.distributed.fsdp import (
    CPUOffload,
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecision,
    MixedPrecisionPolicy,
    OffloadPolicy,
    ShardingStrategy,
)
from torch.nn import Module, Parameter

from fabric_core.errors import ArgumentTypeError, InvalidConfigError

__all__ = [
    "SHARDING_STRATEGIES",
    "Sharding",
    "UnknownShardingStrategyError",
    "as_cpu_offload",
    "as_mixed_precision",
    "cast_buffers",
    "fsdp1_policy",
    "parse_sharding",
    "take_fsdp1_options",
    "to_mixed_precision_policy",
    "to_offload_policy",
]

#: sharding_strategy -> (reshard_after_forward, layout). ``"shard"``: a 1-D mesh over all ranks; ``"hybrid"``:
#: a (replicate, shard) mesh; ``"replicate"``: a (world, 1) mesh, i.e. every rank holds whole parameters and
#: gradients are all-reduced across the replicate dimension (FSDP2's expression of ``NO_SHARD``).
SHARDING_STRATEGIES: Final[dict[str, tuple[bool, str]]] = {
    "FULL_SHARD": (True, "shard"),
    "SHARD_GRAD_OP": (False, "shard"),
    # Nothing to free after forward: the parameters are whole on each rank anyway.
    "NO_SHARD": (False, "replicate"),
    "HYBRID_SHARD": (True, "hybrid"),
    "_HYBRID_SHARD_ZERO2": (False, "hybrid"),
}


class UnknownShardingStrategyError(InvalidConfigError, KeyError):
    """An unknown ``sharding_strategy`` name; a ``KeyError`` too, as Lightning's ``ShardingStrategy[name]``."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclass(frozen=True)
class Sharding:
    """What a ``sharding_strategy`` means under FSDP2."""

    strategy: ShardingStrategy
    reshard_after_forward: bool
    layout: str  # "shard", "hybrid" or "replicate"


def parse_sharding(sharding_strategy: Any, reshard_after_forward: bool | None) -> Sharding:
    """Read ``sharding_strategy`` (a name, any case, or torch's ``ShardingStrategy``) next to ``reshard_after_forward``.

    Raises:
        UnknownShardingStrategyError: An unknown name.
        ArgumentTypeError: Neither a string nor a ``ShardingStrategy``.
        InvalidConfigError: ``reshard_after_forward`` contradicts the strategy.
    """
    if sharding_strategy is None:
        reshard = True if reshard_after_forward is None else reshard_after_forward
        name = "FULL_SHARD" if reshard else "SHARD_GRAD_OP"
        return Sharding(ShardingStrategy[name], reshard, "shard")
    if isinstance(sharding_strategy, ShardingStrategy):
        key = sharding_strategy.name
    elif isinstance(sharding_strategy, str):
        key = sharding_strategy.upper()
    else:
        raise ArgumentTypeError(
            f"`FSDPStrategy(sharding_strategy={sharding_strategy!r})` must be a name or a "
            f"`torch.distributed.fsdp.ShardingStrategy`. Valid choices: {', '.join(map(repr, SHARDING_STRATEGIES))}.",
            argument="sharding_strategy",
            value=sharding_strategy,
        )
    if key not in SHARDING_STRATEGIES:
        raise UnknownShardingStrategyError(
            f"`FSDPStrategy(sharding_strategy={sharding_strategy!r})` is not supported. "
            f"Valid choices: {', '.join(repr(s) for s in SHARDING_STRATEGIES)}.",
            argument="sharding_strategy",
            value=sharding_strategy,
        )
    reshard, layout = SHARDING_STRATEGIES[key]
    if reshard_after_forward is not None and reshard_after_forward != reshard:
        raise InvalidConfigError(
            f"`FSDPStrategy(sharding_strategy={key!r}, reshard_after_forward={reshard_after_forward!r})` contradict "
            f"each other: {key!r} means reshard_after_forward={reshard}. Pass one of them.",
            argument="reshard_after_forward",
            value=reshard_after_forward,
        )
    return Sharding(ShardingStrategy[key], reshard, layout)


# -- CPU offload ---------------------------------------------------------------------------------------------
def to_offload_policy(cpu_offload: Any) -> OffloadPolicy | None:
    """``True``/``False``/``None``, FSDP1's ``CPUOffload`` or an FSDP2 ``OffloadPolicy`` -> the FSDP2 policy.

    Raises:
        ArgumentTypeError: Any other value.
    """
    if cpu_offload is None or cpu_offload is False:
        return None
    if cpu_offload is True:
        return CPUOffloadPolicy()
    if isinstance(cpu_offload, CPUOffload):
        # FSDP1 offloads parameters (and with them gradients); FSDP2's CPUOffloadPolicy does the same.
        return CPUOffloadPolicy() if cpu_offload.offload_params else None
    if isinstance(cpu_offload, OffloadPolicy):
        return cpu_offload if isinstance(cpu_offload, CPUOffloadPolicy) else None
    raise ArgumentTypeError(
        f"`FSDPStrategy(cpu_offload={cpu_offload!r})` must be `True`, `False`, "
        "`torch.distributed.fsdp.CPUOffload(offload_params=...)` or `CPUOffloadPolicy()`.",
        argument="cpu_offload",
        value=cpu_offload,
    )


def as_cpu_offload(policy: OffloadPolicy | None) -> CPUOffload:
    """The FSDP1 ``CPUOffload`` describing ``policy`` (what Lightning's ``FSDPStrategy.cpu_offload`` holds)."""
    return CPUOffload(offload_params=isinstance(policy, CPUOffloadPolicy))


# -- mixed precision -----------------------------------------------------------------------------------------
_DEFAULT_IGNORED: Final = MixedPrecision()._module_classes_to_ignore


def to_mixed_precision_policy(mixed_precision: Any) -> tuple[MixedPrecisionPolicy | None, torch.dtype | None]:
    """FSDP1's ``MixedPrecision`` (or an FSDP2 ``MixedPrecisionPolicy``) -> ``(policy, buffer dtype)``.

    FSDP2 has no ``buffer_dtype`` (buffers are not sharded): the strategy casts the module's floating-point
    buffers to it when it sets the module up, which is what FSDP1 did for training.

    Raises:
        InvalidConfigError: ``keep_low_precision_grads=True`` or a changed ``_module_classes_to_ignore``, which
            FSDP2 cannot express.
        ArgumentTypeError: Any other type.
    """
    if mixed_precision is None or isinstance(mixed_precision, MixedPrecisionPolicy):
        return mixed_precision, None
    if not isinstance(mixed_precision, MixedPrecision):
        raise ArgumentTypeError(
            f"`FSDPStrategy(mixed_precision={mixed_precision!r})` must be a `torch.distributed.fsdp.MixedPrecision` "
            "or a `MixedPrecisionPolicy`.",
            argument="mixed_precision",
            value=mixed_precision,
        )
    if mixed_precision.keep_low_precision_grads:
        raise InvalidConfigError(
            "`FSDPStrategy(mixed_precision=MixedPrecision(keep_low_precision_grads=True))` cannot be expressed with "
            "FSDP2, which hands gradients to the optimizer in the sharded parameters' dtype. To keep parameters and "
            "gradients in low precision use `precision='bf16-true'` (or '16-true'); otherwise drop the option.",
            argument="mixed_precision",
            value=mixed_precision,
        )
    if tuple(mixed_precision._module_classes_to_ignore) != tuple(_DEFAULT_IGNORED):
        raise InvalidConfigError(
            "`FSDPStrategy(mixed_precision=MixedPrecision(_module_classes_to_ignore=...))` cannot be expressed with "
            "FSDP2: a MixedPrecisionPolicy applies to every sharded unit. Shard those modules yourself with "
            "`fully_shard(module, mp_policy=MixedPrecisionPolicy())` before `fabric.setup`.",
            argument="mixed_precision",
            value=mixed_precision,
        )
    policy = MixedPrecisionPolicy(
        param_dtype=mixed_precision.param_dtype,
        reduce_dtype=mixed_precision.reduce_dtype,
        # FSDP1 casts the root's inputs by default (cast_root_forward_inputs); FSDP2 casts each unit's inputs to
        # its param_dtype, which every unit shares here, so the root's cast is the one that matters.
        cast_forward_inputs=mixed_precision.cast_forward_inputs or mixed_precision.cast_root_forward_inputs,
    )
    return policy, mixed_precision.buffer_dtype


def as_mixed_precision(policy: MixedPrecisionPolicy, buffer_dtype: torch.dtype | None = None) -> MixedPrecision:
    """The FSDP1 ``MixedPrecision`` describing an FSDP2 policy (and the buffer dtype applied at setup)."""
    return MixedPrecision(param_dtype=policy.param_dtype, reduce_dtype=policy.reduce_dtype, buffer_dtype=buffer_dtype)


def cast_buffers(module: Module, dtype: torch.dtype) -> None:
    """Cast the floating-point buffers of ``module`` to ``dtype`` in place (FSDP1's ``buffer_dtype``)."""
    for sub in module.modules():
        for name, buffer in sub.named_buffers(recurse=False):
            if buffer is not None and torch.is_floating_point(buffer):
                sub._buffers[name] = buffer.to(dtype)


# -- other FullyShardedDataParallel arguments ----------------------------------------------------------------
#: FSDP1 performance knobs with no effect on results, and nothing to set under FSDP2.
_NO_OPS: Final = {
    # FSDP2 schedules the next unit's all-gather during backward by itself (as BACKWARD_PRE did).
    "backward_prefetch": "FSDP2 prefetches the next unit's all-gather in backward by itself",
    # FSDP2 overlaps the next all-gather with forward compute itself; explicit prefetching is
    # `FSDPModule.set_modules_to_forward_prefetch`.
    "forward_prefetch": "FSDP2 overlaps all-gathers with forward compute by itself",
    # FSDP2 frees each unit's gathered parameters deterministically, so there is no rate limit to set.
    "limit_all_gathers": "FSDP2 bounds its all-gather memory by itself",
}


def take_fsdp1_options(options: dict[str, Any]) -> dict[str, Any]:
    """Remove FSDP1-only arguments from ``options`` (the strategy's ``**kwargs``) and translate them.

    Returns the FSDP2 settings they imply: ``sync_module_states`` (bool) and ``ignored_params`` (a set) when given.

    Raises:
        InvalidConfigError: An FSDP1 argument FSDP2 cannot express (``use_orig_params=False``, ``param_init_fn``,
            ``process_group``); also a ``ValueError``.
        ArgumentTypeError: ``device_id``, which the strategy sets itself (a ``TypeError`` as in Lightning).
    """
    implied: dict[str, Any] = {}
    for name in _NO_OPS:
        options.pop(name, None)
    if options.pop("use_orig_params", True) is False:
        raise InvalidConfigError(
            "`FSDPStrategy(use_orig_params=False)` cannot be expressed with FSDP2: it never flattens parameters, "
            "every parameter stays its own (sharded) tensor, as `use_orig_params=True` did. Remove the option.",
            argument="use_orig_params",
            value=False,
        )
    if "sync_module_states" in options:
        implied["sync_module_states"] = bool(options.pop("sync_module_states"))
    process_group = options.pop("process_group", None)
    if process_group is not None:
        raise InvalidConfigError(
            f"`FSDPStrategy(process_group={process_group!r})` cannot be expressed with FSDP2, which shards over a "
            "device mesh. Use `device_mesh=(replicate, shard)` (sizes) or a `DeviceMesh` instead.",
            argument="process_group",
            value=process_group,
        )
    param_init_fn = options.pop("param_init_fn", None)
    if param_init_fn is not None:
        raise InvalidConfigError(
            "`FSDPStrategy(param_init_fn=...)` cannot be expressed with FSDP2. Create the model with "
            "`with fabric.init_module(empty_init=True):`; the strategy allocates each rank's shards and calls "
            "`reset_parameters()` on every submodule that defines it.",
            argument="param_init_fn",
            value=param_init_fn,
        )
    if "device_id" in options:
        raise ArgumentTypeError(
            f"`FSDPStrategy(device_id={options['device_id']!r})`: the strategy places each rank's shards on that "
            "rank's device itself (`fabric.device`); choose devices with `Fabric(devices=...)`.",
            argument="device_id",
            value=options["device_id"],
        )
    ignored: set[Parameter] = set(options.pop("ignored_params", None) or ())
    for name in ("ignored_modules", "ignored_states"):
        for item in _iterable(options.pop(name, None) or (), name):
            if isinstance(item, Module):
                ignored.update(item.parameters())
            elif isinstance(item, Parameter):
                ignored.add(item)
            else:
                raise ArgumentTypeError(
                    f"`FSDPStrategy({name}=...)` holds {item!r}: it must hold modules or parameters.",
                    argument=name,
                    value=item,
                )
    if ignored:
        # FSDP2's name for the same: these parameters stay whole, unsharded and unsynchronised on each rank.
        implied["ignored_params"] = ignored
    return implied


def _iterable(value: Any, name: str) -> Iterable[Any]:
    if isinstance(value, (Module, Parameter)):
        return (value,)
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise ArgumentTypeError(
            f"`FSDPStrategy({name}={value!r})` must be an iterable of modules or parameters.",
            argument=name,
            value=value,
        )
    return value


# -- wrap policies -------------------------------------------------------------------------------------------
class _Fsdp1Callable:
    """An FSDP1 policy ``(module, recurse, nonwrapped_numel) -> bool`` as a predicate ``(module) -> bool``.

    FSDP1 asks it once with ``recurse=True`` (whether to descend; torch's policies always do) and once with
    ``recurse=False`` and the number of parameters no wrapped descendant holds. The strategy shards children
    first, so that number is the module's parameters outside FSDP units at the time it is asked.
    """

    def __init__(self, policy: Callable[..., bool]) -> None:
        self.policy = policy

    def __call__(self, module: Module) -> bool:
        return bool(self.policy(module=module, recurse=False, nonwrapped_numel=_nonwrapped_numel(module)))


class _CustomPolicy:
    """FSDP1's ``CustomPolicy(lambda_fn)``: a truthy answer wraps the module."""

    def __init__(self, lambda_fn: Callable[[Module], Any]) -> None:
        self.lambda_fn = lambda_fn

    def __call__(self, module: Module) -> bool:
        answer = self.lambda_fn(module)
        if isinstance(answer, Mapping) and answer:
            raise InvalidConfigError(
                f"`CustomPolicy` asked for FSDP1 arguments {sorted(answer)} on {type(module).__name__}: FSDP2 cannot "
                "take per-module FullyShardedDataParallel arguments. Return `True`, or shard that module yourself "
                "with `fully_shard(module, ...)` before `fabric.setup`.",
                argument="auto_wrap_policy",
                value=answer,
            )
        return bool(answer)


def _nonwrapped_numel(module: Module) -> int:
    inside = {id(p) for m in module.modules() if m is not module and isinstance(m, FSDPModule) for p in m.parameters()}
    return sum(p.numel() for p in module.parameters() if id(p) not in inside)


def fsdp1_policy(policy: object) -> tuple[type[Module], ...] | Callable[[Module], bool] | None:
    """An FSDP1 wrap policy as module classes or a predicate ``(module) -> bool``; ``None`` if it is not one.

    Covers ``ModuleWrapPolicy`` (what Lightning builds from a set of classes), ``CustomPolicy`` and the callables
    taking ``(module, recurse, nonwrapped_numel)`` (``size_based_auto_wrap_policy``, ``partial(
    transformer_auto_wrap_policy, ...)``, ...).
    """
    module_classes = getattr(policy, "_module_classes", None)
    if module_classes is not None:
        return tuple(module_classes)
    lambda_fn = getattr(policy, "_lambda_fn", None)
    if callable(lambda_fn):
        return _CustomPolicy(lambda_fn)
    if callable(policy):
        try:
            parameters = inspect.signature(policy).parameters
        except (TypeError, ValueError):  # a builtin without a signature: not an FSDP1 policy
            return None
        if "recurse" in parameters and "nonwrapped_numel" in parameters:
            return _Fsdp1Callable(policy)
    return None
