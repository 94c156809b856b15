"""Module-initialisation helpers: skipping ``torch.nn.init``, and turning meta-device modules into real ones.

Lightning's private names for these (``_EmptyInit``, ``_materialize_meta_tensors``, ...) are aliases at the end.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.nn import Module, Parameter
from torch.optim import Optimizer
from torch.overrides import TorchFunctionMode

from fabric_core._deferred import lightning_reexports
from fabric_core.utilities.rank_zero import rank_zero_warn

__all__ = [
    "EmptyInit",
    "has_meta_device_parameters_or_buffers",
    "materialize_distributed_module",
    "materialize_meta_tensors",
]


class EmptyInit(TorchFunctionMode):
    """Skip every ``torch.nn.init`` call inside the block: parameters keep uninitialised memory.

    Used by ``fabric.init_module(empty_init=True)`` when weights will be loaded from a checkpoint anyway:
    creating the model is faster and draws no random numbers.
    """

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        self.enabled = enabled

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.enabled and getattr(func, "__module__", None) == "torch.nn.init":
            if "tensor" in kwargs:
                return kwargs["tensor"]
            return args[0]
        return func(*args, **kwargs)

def has_meta_device_parameters_or_buffers(obj: Module | Optimizer, recurse: bool = True) -> bool:
    """Whether a module has a parameter or buffer on the meta device, or an optimizer holds such a parameter.

    Raises:
        TypeError: ``obj`` is neither a module nor an optimizer.
    """
    if isinstance(obj, Optimizer):
        return any(
            isinstance(t, Parameter) and t.is_meta for group in obj.param_groups for t in group["params"]
        )
    if isinstance(obj, Module):
        return any(t.is_meta for t in itertools.chain(obj.parameters(recurse=recurse), obj.buffers(recurse=recurse)))
    raise TypeError(f"Expected `torch.nn.Module` or `torch.optim.Optimizer`, got: {type(obj).__name__}")


def _materialize(module: Module, device: torch.device | str | int) -> None:
    """Allocate ``module``'s own (not its children's) tensors on ``device`` and re-initialise them.

    Raises:
        TypeError: The module has no ``reset_parameters`` to initialise the new memory with.
    """
    module.to_empty(device=device, recurse=False)
    if not hasattr(module, "reset_parameters"):
        raise TypeError(
            f"Materialization requires that the `{type(module).__name__}.reset_parameters` method is implemented:"
            " it initialises the module's parameters and buffers once they are allocated on the device."
        )
    if callable(module.reset_parameters):
        module.reset_parameters()


def materialize_meta_tensors(module: Module, device: torch.device | str | int) -> None:
    """Allocate every meta-device parameter and buffer of ``module`` on ``device`` and re-initialise it.

    Each submodule that holds meta tensors of its own is moved with ``to_empty`` and its ``reset_parameters()``
    is called; submodules already on a real device are left as they are.

    Raises:
        TypeError: A submodule with meta tensors has no ``reset_parameters``.
    """
    for sub in module.modules():
        if has_meta_device_parameters_or_buffers(sub, recurse=False):
            _materialize(sub, device)


def materialize_distributed_module(module: Module, device: torch.device) -> None:
    """Allocate a (sharded) module created on the meta device, then call ``reset_parameters()`` everywhere.

    ``to_empty`` runs once on the root, so sharded parameters get each rank's local shards; every submodule that
    holds tensors and defines ``reset_parameters`` initialises them. Submodules without it are named in one
    warning: their memory stays uninitialised. A module with no meta tensors is left untouched.
    """
    if not has_meta_device_parameters_or_buffers(module):
        return
    module.to_empty(device=device)
    uninitialized: set[str] = set()
    for sub in module.modules():
        if not any(True for _ in itertools.chain(sub.parameters(recurse=False), sub.buffers(recurse=False))):
            continue
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset):
            reset()
        else:
            uninitialized.add(type(sub).__name__)
    if uninitialized:
        rank_zero_warn(
            "Parameter initialization incomplete: the parameters or buffers of these modules hold uninitialized "
            "memory, because they have no `reset_parameters()` method for re-initialization: "
            f"{', '.join(sorted(uninitialized))}."
        )


# Lightning's private names for the helpers above.
_EmptyInit = EmptyInit
_has_meta_device_parameters_or_buffers = has_meta_device_parameters_or_buffers
_materialize_meta_tensors = materialize_meta_tensors
_materialize_distributed_module = materialize_distributed_module

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
