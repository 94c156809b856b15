"""Sharded (DTensor) parameters: their total gradient norm, gathering them whole, skipping gradient sync."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from types import TracebackType
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.nn import Module

from fabric_core.strategies.strategy import BackwardSyncControl

__all__ = ["GradientSyncPause", "ShardedBackwardSyncControl", "gathered", "local", "total_norm"]


def local(tensor: Tensor) -> Tensor:
    """The part of a DTensor this rank holds; a plain tensor as it is."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def total_norm(grads: list[Tensor], norm_type: float) -> Tensor:
    """The ``norm_type`` norm of all gradients together, as if they were unsharded; the same on every rank.

    DTensor gradients are grouped by mesh and placements: one reduction per group.
    """
    groups: dict[Any, list[Tensor]] = {}
    for g in grads:
        key = (g.device_mesh, g.placements) if isinstance(g, DTensor) else None
        groups.setdefault(key, []).append(g)
    if not groups:
        return torch.tensor(0.0)
    norms: list[Tensor] = []
    for key, members in groups.items():
        norm = torch.nn.utils.get_total_norm(members, norm_type)
        norms.append(norm.full_tensor() if key is not None and isinstance(norm, DTensor) else norm)
    device = norms[0].device
    total: Tensor = torch.linalg.vector_norm(torch.stack([n.to(device) for n in norms]), norm_type)
    return total


def _own_parameters(module: Module) -> dict[str, Tensor]:
    """The parameters FSDP manages at ``module``: its own, minus those of nested FSDP modules."""
    nested = {
        id(p) for sub in module.modules() if sub is not module and isinstance(sub, FSDPModule) for p in sub.parameters()
    }
    return {n: p for n, p in module.named_parameters() if id(p) not in nested}


@contextlib.contextmanager
def gathered(roots: list[Module], params: Iterable[Tensor], modifier_rank: int | None) -> Generator[None, None, None]:
    """Unshard the FSDP units of ``roots`` that hold ``params``; on exit keep the edits of ``modifier_rank``."""
    wanted = {id(p) for p in params}
    chosen: list[tuple[Module, dict[str, Tensor]]] = []
    for root in roots:
        for sub in root.modules():
            if isinstance(sub, FSDPModule):
                own = _own_parameters(sub)
                if any(id(p) in wanted for p in own.values()):
                    chosen.append((sub, own))
    for sub, _ in chosen:
        cast(FSDPModule, sub).unshard()
    try:
        yield
    finally:
        # While unsharded, the modules hold whole tensors that resharding discards: keep the modifier's edits.
        edited: list[tuple[Tensor, DTensor]] = []
        if modifier_rank is not None:
            for sub, own in chosen:
                for name, sharded in own.items():
                    if isinstance(sharded, DTensor):
                        edited.append((sub.get_parameter(name).detach().clone(), sharded))
        for sub, _ in chosen:
            cast(FSDPModule, sub).reshard()
        with torch.no_grad():
            for whole, sharded in edited:
                dist.broadcast(whole, src=modifier_rank if modifier_rank is not None else 0)
                shard = distribute_tensor(whole, sharded.device_mesh, sharded.placements, src_data_rank=None)
                sharded.to_local().copy_(shard.to_local())


class ShardedBackwardSyncControl(BackwardSyncControl):
    """``fabric.no_backward_sync(model)``: FSDP keeps unreduced gradients until a synchronised backward."""

    def no_backward_sync(self, module: Module, enabled: bool) -> contextlib.AbstractContextManager[Any]:
        """Skip the reduce-scatter of gradients of every FSDP module in ``module`` inside the block.

        Raises:
            TypeError: ``module`` contains no FSDP module (it was not set up by a sharded strategy).
        """
        if not enabled:
            return contextlib.nullcontext()
        if not any(isinstance(m, FSDPModule) for m in module.modules()):
            raise TypeError(
                "Blocking backward sync is only possible if the module passed to "
                f"`{type(self).__name__}.no_backward_sync` is sharded with FSDP (`fully_shard`). "
                f"Got: {type(module).__name__}."
            )
        return GradientSyncPause(module, enabled)


class GradientSyncPause(contextlib.AbstractContextManager[None]):
    """While entered, the FSDP modules in ``module`` keep their gradients unreduced (when ``enabled``).

    Each FSDP module is switched on its own (``recurse=False``): nested units are found by walking ``module``.
    On exit they reduce again. A module without FSDP modules is left alone.
    """

    def __init__(self, module: Module, enabled: bool = True) -> None:
        self._module = module
        self._enabled = enabled

    def _set_requires_gradient_sync(self, requires: bool) -> None:
        for m in self._module.modules():
            if isinstance(m, FSDPModule):
                m.set_requires_gradient_sync(requires, recurse=False)

    def __enter__(self) -> None:
        if self._enabled:
            self._set_requires_gradient_sync(False)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._enabled:
            self._set_requires_gradient_sync(True)
