"""Pure half precision (``"16-true"``, ``"bf16-true"``): parameters and computation in fp16 or bf16."""

from __future__ import annotations

from typing import Final

import torch

from fabric_core.precision.float_cast import FloatCastPrecision, supported, true_conversions

__all__ = ["HalfPrecision"]

_DTYPES: Final[dict[str, torch.dtype]] = {"16-true": torch.float16, "bf16-true": torch.bfloat16}


class HalfPrecision(FloatCastPrecision):
    """Parameters, inputs and computation in fp16 (``"16-true"``) or bf16 (``"bf16-true"``), no autocast.

    Halves memory against full precision but keeps no fp32 master weights, so small updates can be lost.
    Outputs leave the model converted back to ``torch.get_default_dtype()``.

    Args:
        precision: ``"16-true"`` or ``"bf16-true"``.

    Raises:
        InvalidConfigError: ``precision`` is neither.
    """

    def __init__(self, precision: str = "16-true") -> None:
        dtype = supported(_DTYPES, precision, f"`HalfPrecision(precision={precision!r})`")
        self.precision = precision
        self.dtype: Final = dtype
        self._desired_input_dtype: Final = dtype  # Lightning's name for the same dtype
        self._conversions = true_conversions(dtype)
