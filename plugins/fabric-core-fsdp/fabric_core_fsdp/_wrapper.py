"""What FSDP1 (``FullyShardedDataParallel``) needs beside its constructor: policies, dtypes, syncing, gathering.

Used by :class:`~fabric_core_fsdp.fsdp1.FSDP1Strategy` only; nothing here touches FSDP2 modules.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, Final, TypeGuard

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel, MixedPrecision
from torch.distributed.fsdp.wrap import CustomPolicy, ModuleWrapPolicy
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import InvalidConfigError
from fabric_core.strategies.strategy import BackwardSyncControl
from fabric_core.utilities.rank_zero import rank_zero_deprecation, rank_zero_warn

__all__ = [
    "FSDP1BackwardSyncControl",
    "check_group_or_mesh",
    "checkpoint_activations",
    "checkpointing_selection",
    "fsdp1_cpu_offload",
    "has_flat_params",
    "has_fsdp1_units",
    "keep_state_dicts_on_cpu_devices",
    "lightning_mixed_precision",
    "summoned",
    "wrap_policy",
]

#: precision -> the dtype FSDP1 gathers, reduces and keeps buffers in (Lightning's FSDP1 plugin's choice).
_DTYPES: Final = {
    "32-true": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
}


def lightning_mixed_precision(precision: str | None) -> MixedPrecision | None:
    """The ``MixedPrecision`` Lightning's FSDP1 strategy runs a precision string with; ``None`` for others."""
    dtype = _DTYPES.get(precision or "")
    if dtype is None:
        return None
    return MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype)


def wrap_policy(policy: Any, argument: str) -> Any:
    """An FSDP1 policy from what Lightning accepts: a set of module classes, an FSDP1 policy, or ``(module) -> bool``.

    Raises:
        InvalidConfigError: A collection holding something other than module classes, or not a callable.
    """
    if policy is None:
        return None
    if isinstance(policy, (set, frozenset, list, tuple)):
        if not all(isinstance(c, type) and issubclass(c, Module) for c in policy):
            raise InvalidConfigError(
                f"`FSDP1Strategy({argument}={policy!r})` must hold `torch.nn.Module` classes only.",
                argument=argument,
                value=policy,
            )
        return ModuleWrapPolicy(set(policy))
    if isinstance(policy, (ModuleWrapPolicy, CustomPolicy)):
        return policy
    if callable(policy):
        try:
            parameters = inspect.signature(policy).parameters
        except (TypeError, ValueError):
            parameters = {}  # type: ignore[assignment]
        if "recurse" in parameters and "nonwrapped_numel" in parameters:
            return policy  # size_based_auto_wrap_policy, partial(transformer_auto_wrap_policy, ...), ...
        return CustomPolicy(policy)  # a predicate `(module) -> bool`
    raise InvalidConfigError(
        f"`FSDP1Strategy({argument}={policy!r})` must be a set of `torch.nn.Module` classes, an FSDP1 policy "
        "(`ModuleWrapPolicy`, `CustomPolicy`, `size_based_auto_wrap_policy`, ...) or a callable `(module) -> bool`.",
        argument=argument,
        value=policy,
    )


def checkpointing_selection(
    activation_checkpointing: type[Module] | list[type[Module]] | None, activation_checkpointing_policy: Any
) -> dict[str, Any]:
    """The submodules to checkpoint, as keywords of torch's ``apply_activation_checkpointing`` (``{}``: none).

    ``activation_checkpointing`` (classes, deprecated as in Lightning) and ``activation_checkpointing_policy``
    (the forms of :func:`wrap_policy`) both become an ``auto_wrap_policy``.

    Raises:
        InvalidConfigError: Both arguments were given, or the policy has the wrong form.
    """
    if activation_checkpointing is not None:
        if activation_checkpointing_policy is not None:
            raise InvalidConfigError(
                "You cannot set both `activation_checkpointing` and `activation_checkpointing_policy`. Use the latter.",
                argument="activation_checkpointing",
                value=activation_checkpointing,
            )
        classes = activation_checkpointing if isinstance(activation_checkpointing, list) else [activation_checkpointing]
        rank_zero_deprecation(
            f"`FSDPStrategy(activation_checkpointing={activation_checkpointing!r})` is deprecated, use "
            f"`FSDPStrategy(activation_checkpointing_policy={set(classes)!r})` instead."
        )
        activation_checkpointing_policy = set(classes)
    policy = wrap_policy(activation_checkpointing_policy, "activation_checkpointing_policy")
    return {} if policy is None else {"auto_wrap_policy": policy}


def fsdp1_cpu_offload(cpu_offload: bool | CPUOffload | None) -> CPUOffload:
    """The ``CPUOffload`` for the ``cpu_offload`` argument: itself, or ``offload_params`` set to its truth."""
    return cpu_offload if isinstance(cpu_offload, CPUOffload) else CPUOffload(offload_params=bool(cpu_offload))


def check_group_or_mesh(options: Mapping[str, Any], owner: str = "FSDPStrategy") -> None:
    """Refuse ``process_group`` and ``device_mesh`` together in ``options`` (the FSDP1 arguments).

    Raises:
        InvalidConfigError: Both are set (not ``None``).
    """
    if options.get("process_group") is not None and options.get("device_mesh") is not None:
        raise InvalidConfigError(
            f"The arguments `{owner}(process_group=..., device_mesh=...)` are mutually exclusive. Pass only one of "
            "them.",
            argument="device_mesh",
            value=options["device_mesh"],
        )


def has_flat_params(optimizer: Optimizer) -> bool:
    """Whether ``optimizer`` holds FSDP1's flat parameters (those of units wrapped with ``use_orig_params=False``)."""
    return any(getattr(p, "_fsdp_flattened", False) for group in optimizer.param_groups for p in group["params"])


def has_fsdp1_units(module: object) -> TypeGuard[Module]:
    """Whether ``module`` is a module holding (or being) a ``FullyShardedDataParallel`` unit."""
    return isinstance(module, Module) and any(isinstance(m, FullyShardedDataParallel) for m in module.modules())


def keep_state_dicts_on_cpu_devices(module: Module) -> None:
    """Make ``offload_to_cpu=True`` a no-op for the FSDP1 units of ``module`` when they compute on the CPU.

    FSDP1 offloads a gathered parameter by copying it to the CPU and freeing the original; when the original
    is on the CPU already the copy is the same memory, so the state dict then reads freed memory and the process
    dies with a segmentation fault (torch 2.13, ``FSDP.state_dict_type(..., FullStateDictConfig(
    offload_to_cpu=True))`` and ``summon_full_params(offload_to_cpu=True)``). Each unit's handle gets, as an
    attribute of that handle only, a ``to_cpu`` that keeps the gathered parameter where it is: on the CPU,
    which is what was asked.
    """
    for unit in FullyShardedDataParallel.fsdp_modules(module):
        handle = getattr(unit, "_handle", None)
        if handle is not None and handle.flat_param.device.type == "cpu":
            handle.to_cpu = contextlib.nullcontext


@contextlib.contextmanager
def summoned(
    roots: Sequence[Module], params: Iterable[Tensor], modifier_rank: int | None
) -> Generator[None, None, None]:
    """Gather the full parameters of the FSDP1 roots holding ``params``; keep ``modifier_rank``'s edits on exit."""
    wanted = {id(p) for p in params}
    chosen = [root for root in roots if any(id(p) in wanted for p in root.parameters())]
    with contextlib.ExitStack() as stack:
        for root in chosen:
            stack.enter_context(FullyShardedDataParallel.summon_full_params(root, writeback=modifier_rank is not None))
        yield
        if modifier_rank is not None and dist.is_initialized():
            # Every rank writes its own copy back into its shard: first give every rank the modifier's copy.
            with torch.no_grad():
                for root in chosen:
                    for p in root.parameters():
                        dist.broadcast(p.data, src=modifier_rank)


class FSDP1BackwardSyncControl(BackwardSyncControl):
    """``fabric.no_backward_sync(model)`` with FSDP1: the root's ``no_sync()``."""

    def no_backward_sync(self, module: Module, enabled: bool) -> contextlib.AbstractContextManager[Any]:
        """Skip the gradient reduction of the FSDP1 root ``module`` inside the block.

        Raises:
            TypeError: ``module`` is not wrapped in ``FullyShardedDataParallel``.
        """
        return self.wrapper_no_sync(module, enabled, FullyShardedDataParallel)


def checkpoint_activations(module: Module, selection: Mapping[str, Any]) -> None:
    """Wrap the submodules ``selection`` picks in activation checkpointing, as Lightning does.

    Args:
        module: The model (wrapped or not).
        selection: Keywords of torch's ``apply_activation_checkpointing``: ``auto_wrap_policy`` (an FSDP1
            policy) or ``check_fn`` (``(module) -> bool``); empty: nothing is checkpointed.
    """
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointWrapper,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    if not selection:
        return
    if any(isinstance(m, CheckpointWrapper) for m in module.modules()):
        rank_zero_warn(
            "FSDP checkpointing is configured, but the model already contains checkpointed layers. Checkpointing "
            "will be ignored."
        )
        return
    apply_activation_checkpointing(module, checkpoint_wrapper_fn=checkpoint_wrapper, **selection)
