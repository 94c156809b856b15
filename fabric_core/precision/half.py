"""Pure half precision (``"16-true"``, ``"bf16-true"``): parameters and computation in fp16 or bf16."""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Final

import torch
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import (
    TO_DEFAULT_DTYPE,
    Precision,
    casts_floats_to,
    convert_floating_tensors,
    default_dtype,
)

__all__ = ["HalfPrecision"]

_DTYPES: Final[dict[str, torch.dtype]] = {"16-true": torch.float16, "bf16-true": torch.bfloat16}


class HalfPrecision(Precision):
    """Parameters, inputs and computation in fp16 (``"16-true"``) or bf16 (``"bf16-true"``), no autocast.

    Halves memory against full precision but keeps no fp32 master weights, so small updates can be lost.
    Outputs leave the model converted back to ``torch.get_default_dtype()``.

    Args:
        precision: ``"16-true"`` or ``"bf16-true"``.

    Raises:
        InvalidConfigError: ``precision`` is neither.
    """

    def __init__(self, precision: str = "16-true") -> None:
        dtype = _DTYPES.get(precision)
        if dtype is None:
            raise InvalidConfigError(
                f"`HalfPrecision(precision={precision!r})` is not supported. "
                f"Valid choices: {', '.join(repr(name) for name in _DTYPES)}.",
                argument="precision",
                value=precision,
            )
        self.precision = precision
        self.dtype: Final = dtype

    def convert_module(self, module: Module) -> Module:
        """Cast the module's floating-point parameters and buffers to the half dtype."""
        return module.to(dtype=self.dtype)

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Tensors created inside default to the half dtype."""
        return default_dtype(self.dtype)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Tensors created inside the forward default to the half dtype, matching the parameters."""
        return default_dtype(self.dtype)

    @casts_floats_to(operator.attrgetter("dtype"))
    def convert_input(self, data: Any) -> Any:
        """Cast floating-point input tensors to the half dtype."""
        return convert_floating_tensors(data, self.dtype)

    @TO_DEFAULT_DTYPE
    def convert_output(self, data: Any) -> Any:
        """Cast floating-point output tensors back to ``torch.get_default_dtype()``."""
        return convert_floating_tensors(data, torch.get_default_dtype())
