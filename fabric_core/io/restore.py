"""Restoring a user's ``state`` dict from a loaded checkpoint, with Lightning Fabric's semantics."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Container, Iterable
from typing import Any

import torch
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.utilities.apply_func import apply_to_collection
from fabric_core.utilities.types import ModuleLoader, Stateful

__all__ = ["check_requested_keys", "load_module", "restore_state"]

#: The suffix of the state-dict entry ``Module.set_extra_state`` receives.
_EXTRA_STATE_SUFFIX = "_extra_state"


def load_module(
    strategy: ModuleLoader, module: Module, state_dict: Any, strict: bool = True, *, mapped: bool = False
) -> None:
    """Load ``state_dict`` into ``module`` through the strategy (anything with ``load_module_state_dict``).

    With ``mapped`` (its tensors map the checkpoint file, ``load_checkpoint(..., mmap=True)``),
    ``load_state_dict`` copies each tensor into the module's own, straight from the file's pages. What a
    module could keep instead is copied: the entries ``set_extra_state`` receives, and any parameter or
    buffer that ends up sharing a loaded tensor's memory (a custom ``_load_from_state_dict`` that assigns).
    Nothing then keeps the mapping, so the file's blocks are freed when it is replaced or deleted.
    """
    if not mapped:
        strategy.load_module_state_dict(module, state_dict, strict=strict)
        return
    extra_states = [k for k in state_dict if isinstance(k, str) and k.endswith(_EXTRA_STATE_SUFFIX)]
    if extra_states:
        state_dict = copy.copy(state_dict)  # a shallow copy keeps what the dict carries (`_metadata`, versions)
        for key in extra_states:
            state_dict[key] = copy.deepcopy(state_dict[key])
    strategy.load_module_state_dict(module, state_dict, strict=strict)
    file_storages: set[int] = set()
    apply_to_collection(state_dict, torch.Tensor, lambda t: file_storages.add(t.untyped_storage().data_ptr()))
    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            if tensor.device.type == "cpu" and tensor.untyped_storage().data_ptr() in file_storages:
                tensor.data = tensor.data.clone()


def check_requested_keys(requested: Iterable[str], available: Container[str], strict: bool) -> None:
    """With ``strict``, refuse a requested key that the checkpoint does not hold.

    Raises:
        KeyError: The first such key, named, with how to load anyway.
    """
    if not strict:
        return
    missing = [key for key in requested if key not in available]
    if missing:
        raise KeyError(
            f"The requested state contains a key '{missing[0]}' that does not exist in the loaded "
            "checkpoint. To disable strict loading, set `strict=False`."
        )


def restore_state(
    strategy: ModuleLoader,
    state: dict[str, Any],
    checkpoint: dict[str, Any],
    strict: bool = True,
    *,
    mapped: bool = False,
) -> dict[str, Any]:
    """Load each entry of ``checkpoint`` into the object of the same key in ``state``.

    Modules and optimizers (and any object with ``load_state_dict``) are restored in place; plain values
    are written back into ``state``. Returns what the checkpoint holds that ``state`` did not ask for.

    With ``mapped`` (the checkpoint's tensors map its file, see ``load_checkpoint(..., mmap=True)``),
    modules load straight from the file's pages (:func:`load_module`); everything else is
    copied first, because optimizers, stateful objects and the caller keep what they are given.

    Raises:
        KeyError: With ``strict``, ``state`` asks for a key the checkpoint does not have.
    """
    check_requested_keys(state, checkpoint, strict)
    remainder = dict(checkpoint)
    for key, obj in list(state.items()):
        if key not in remainder:
            continue
        value = remainder.pop(key)
        if isinstance(obj, Module):
            load_module(strategy, obj, value, strict=strict, mapped=mapped)
            continue
        if mapped:
            value = copy.deepcopy(value)
        if isinstance(obj, (Optimizer, Stateful)):
            obj.load_state_dict(value)
        else:
            state[key] = value
    return copy.deepcopy(remainder) if mapped else remainder
