"""Helpers precision classes share, under Lightning's names: dtype and class-swapping context managers.

Lightning's ``plugins.precision.utils`` path re-exports them, with fabric-core's own :func:`convert_floating_tensors`
and :func:`default_dtype`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from fabric_core.precision.precision import convert_floating_tensors

__all__ = ["_ClassReplacementContextManager", "_DtypeContextManager", "_convert_fp_tensor"]


def _convert_fp_tensor(tensor: Tensor, dst_type: str | torch.dtype) -> Tensor:
    """``tensor`` converted to ``dst_type`` if it is floating point; any other tensor unchanged."""
    if isinstance(dst_type, torch.dtype):
        return convert_floating_tensors(tensor, dst_type)  # type: ignore[no-any-return]
    return tensor.to(dst_type) if torch.is_floating_point(tensor) else tensor


class _DtypeContextManager:
    """Sets ``torch``'s default dtype to ``dtype`` inside the block; restores the one in place at construction.

    Not a decorator: the dtype to restore is read when the object is made.

    Args:
        dtype: The default dtype inside the block.
    """

    def __init__(self, dtype: torch.dtype) -> None:
        self._previous_dtype: torch.dtype = torch.get_default_dtype()
        self._new_dtype = dtype

    def __enter__(self) -> None:
        torch.set_default_dtype(self._new_dtype)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        torch.set_default_dtype(self._previous_dtype)


class _ClassReplacementContextManager:
    """Replaces classes in their modules inside the block (``{"torch.nn.Linear": MyLinear}``), then restores them.

    The modules are imported, and the originals looked up, at construction.

    Args:
        mapping: ``{"module.path.ClassName": replacement}``.

    Raises:
        ModuleNotFoundError: A module of ``mapping`` does not import.
        AttributeError: A module has no such class.
    """

    def __init__(self, mapping: Mapping[str, type]) -> None:
        self._mapping = mapping
        self._modules: dict[str, Any] = {}
        self._originals: dict[str, Any] = {}
        for path in mapping:
            module_name, class_name = path.rsplit(".", 1)
            module = importlib.import_module(module_name)
            self._modules[path] = module
            self._originals[path] = getattr(module, class_name)

    def __enter__(self) -> None:
        for path, replacement in self._mapping.items():
            setattr(self._modules[path], path.rsplit(".", 1)[1], replacement)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        for path in self._mapping:
            setattr(self._modules[path], path.rsplit(".", 1)[1], self._originals[path])
