"""Double precision (``"64-true"``): parameters, inputs and computation in float64."""

from __future__ import annotations

import torch

from fabric_core.precision.float_cast import FloatCastPrecision, true_conversions

__all__ = ["DoublePrecision"]


class DoublePrecision(FloatCastPrecision):
    """Everything in float64: for numerically sensitive work where speed matters less than accuracy.

    Outputs leave the model converted back to ``torch.get_default_dtype()``, so code after the forward
    sees the same dtype as in full precision.
    """

    precision = "64-true"
    _conversions = true_conversions(torch.float64)
