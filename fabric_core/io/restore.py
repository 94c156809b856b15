"""Restoring a user's ``state`` dict from a loaded checkpoint, with Lightning Fabric's semantics."""

from __future__ import annotations

import copy
import itertools
import sys
from collections.abc import Container, Iterable
from typing import Any

import torch
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.io._pages import FilePages
from fabric_core.utilities.apply_func import apply_to_collection
from fabric_core.utilities.types import ModuleLoader, Stateful

__all__ = ["check_requested_keys", "load_module", "load_optimizer", "restore_state"]

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
    Nothing then keeps the mapping, so the file's blocks are freed when it is replaced or deleted; the pages
    read are handed back as soon as the module has its copy (see :class:`~fabric_core.io._pages.FilePages`).
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
    file_storages = _storages(state_dict)
    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            if _host_storage(tensor) in file_storages:
                tensor.data = tensor.data.clone()
    apply_to_collection(state_dict, torch.Tensor, FilePages().release)


def _host_storage(tensor: torch.Tensor) -> int | None:
    """Where ``tensor``'s storage starts if it lives in host memory (a mapped file can only be there), else
    ``None``: the tensors of devices such as XLA's have no address to compare."""
    return tensor.untyped_storage().data_ptr() if tensor.device.type == "cpu" else None


def _storages(collection: Any) -> set[int]:
    """The addresses of the host storages of the tensors in ``collection`` (an empty storage, at address 0,
    holds nothing of a file; device tensors have none)."""
    found: set[int | None] = set()
    apply_to_collection(collection, torch.Tensor, lambda t: found.add(_host_storage(t)))
    return {address for address in found if address}


def _copied(value: Any, pages: FilePages, memo: dict[int, Any] | None = None) -> Any:
    """A deep copy of ``value`` (of a mapped checkpoint), after which the file's pages it read are handed back.

    Copies made with one ``memo`` share what their originals shared.
    """
    copied = copy.deepcopy(value, memo)
    apply_to_collection(value, torch.Tensor, pages.release)
    return copied


def _spare_fits(spare: Any, loaded: torch.Tensor) -> bool:
    """Whether the tensor ``spare`` can take ``loaded``'s values in place: the same kind, size and layout, a
    storage of its own, and nobody but the caller holding it (the caller's name and the call's argument)."""
    return (
        type(spare) is torch.Tensor
        and type(loaded) is torch.Tensor
        and sys.getrefcount(spare) <= 3  # the caller's name, this argument, getrefcount's argument
        and not spare.requires_grad
        and not spare._is_view()
        and (spare.device, spare.dtype, spare.shape, spare.stride())
        == (loaded.device, loaded.dtype, loaded.shape, loaded.stride())
        and spare.storage_offset() == 0
        and spare.untyped_storage().nbytes() == spare.numel() * spare.element_size()
    )


def load_optimizer(optimizer: Optimizer, state_dict: Any, *, mapped: bool = False) -> None:
    """``optimizer.load_state_dict(state_dict)``, keeping nothing of the file when ``state_dict`` maps it.

    With ``mapped``, torch's ``Optimizer.load_state_dict`` keeps the tensors it is given wherever their dtype
    and device already fit (the state of a resumed run: nearly all of it). It is handed the mapped tensors,
    and then each one it kept is copied out of the file, its pages handed back at once
    (:class:`~fabric_core.io._pages.FilePages`): the load adds about one tensor's memory, not the
    checkpoint's. The copy goes into the tensor of the state it replaced (same key, shape and dtype) where
    nothing else holds that tensor, which spares the time of new memory (a fresh page costs far more than
    a copy); otherwise into a new tensor. An optimizer with a ``load_state_dict`` of its own could keep what
    it is given anywhere: it gets a copy of everything.
    """
    if not mapped:
        optimizer.load_state_dict(state_dict)
        return
    pages = FilePages()
    if type(optimizer).load_state_dict is not Optimizer.load_state_dict:
        optimizer.load_state_dict(_copied(state_dict, pages))
        return
    file_storages = _storages(state_dict)

    def own(tensor: torch.Tensor) -> torch.Tensor:
        return pages.copy_out(tensor) if _host_storage(tensor) in file_storages else tensor

    previous = {param: dict(kept) for param, kept in optimizer.state.items() if isinstance(kept, dict)}
    optimizer.load_state_dict(state_dict)
    for param, param_state in list(optimizer.state.items()):
        if not isinstance(param_state, dict):
            optimizer.state[param] = apply_to_collection(param_state, torch.Tensor, own)
            continue
        spares = previous.pop(param, {})
        for name, value in list(param_state.items()):
            spare = spares.pop(name, None)
            mapped_here = isinstance(value, torch.Tensor) and _host_storage(value) in file_storages
            if mapped_here and _spare_fits(spare, value) and not pages.maps_file(spare):
                param_state[name] = spare.copy_(value)
                pages.release(value)
                continue
            param_state[name] = apply_to_collection(value, torch.Tensor, own)
            del spare
    # Tensors in the groups were deep-copied by load_state_dict; anything else of the file is handed back too.
    apply_to_collection(state_dict, torch.Tensor, pages.release)


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
    modules load straight from the file's pages (:func:`load_module`), optimizers keep copies made tensor by
    tensor (:func:`load_optimizer`); everything else is copied first, because stateful objects and the caller
    keep what they are given.

    Raises:
        KeyError: With ``strict``, ``state`` asks for a key the checkpoint does not have.
    """
    check_requested_keys(state, checkpoint, strict)
    remainder = dict(checkpoint)
    # For the copies: the file's mappings (read once), and one memo so that copies share what originals share.
    pages, memo = (FilePages() if mapped else None), dict[int, Any]()
    for key, obj in list(state.items()):
        if key not in remainder:
            continue
        value = remainder.pop(key)
        if isinstance(obj, Module):
            load_module(strategy, obj, value, strict=strict, mapped=mapped)
            continue
        if isinstance(obj, Optimizer):
            load_optimizer(obj, value, mapped=mapped)
            continue
        if pages is not None:
            value = _copied(value, pages, memo)
        if isinstance(obj, Stateful):
            obj.load_state_dict(value)
        else:
            state[key] = value
    if pages is None:
        return remainder
    return {key: _copied(value, pages, memo) for key, value in remainder.items()}
