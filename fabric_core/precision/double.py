"""Double precision (``"64-true"``): parameters, inputs and computation in float64."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.nn import Module

from fabric_core.precision.precision import (
    TO_DEFAULT_DTYPE,
    Precision,
    casts_floats_to,
    convert_floating_tensors,
    default_dtype,
)

__all__ = ["DoublePrecision"]


class DoublePrecision(Precision):
    """Everything in float64: for numerically sensitive work where speed matters less than accuracy.

    Outputs leave the model converted back to ``torch.get_default_dtype()``, so code after the forward
    sees the same dtype as in full precision.
    """

    precision = "64-true"

    def convert_module(self, module: Module) -> Module:
        """Cast the module's floating-point parameters and buffers to float64."""
        return module.double()

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Tensors created inside default to float64."""
        return default_dtype(torch.float64)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Tensors created inside the forward default to float64, matching the parameters."""
        return default_dtype(torch.float64)

    @casts_floats_to(lambda _: torch.float64)
    def convert_input(self, data: Any) -> Any:
        """Cast floating-point input tensors to float64."""
        return convert_floating_tensors(data, torch.float64)

    @TO_DEFAULT_DTYPE
    def convert_output(self, data: Any) -> Any:
        """Cast floating-point output tensors back to ``torch.get_default_dtype()``."""
        return convert_floating_tensors(data, torch.get_default_dtype())
