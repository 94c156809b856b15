"""Automatic mixed precision (``"16-mixed"``, ``"bf16-mixed"``) through ``torch.autocast``."""

from __future__ import annotations

from typing import Any, Final

import torch
from torch.amp import GradScaler

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.float_cast import mixed_conversions
from fabric_core.precision.scaling import LossScaling

__all__ = ["MixedPrecision"]

_DTYPES: Final[dict[str, torch.dtype]] = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


class MixedPrecision(LossScaling):
    """Parameters stay in float32; the forward runs under ``torch.autocast`` in fp16 or bf16.

    ``"16-mixed"`` scales the loss with a :class:`torch.amp.GradScaler` so that small fp16 gradients do
    not flush to zero: backward scales the loss, clipping unscales the gradients first, and the optimizer
    step is skipped when the gradients overflowed. ``"bf16-mixed"`` has fp32's range and needs no scaler.

    Args:
        precision: ``"16-mixed"`` or ``"bf16-mixed"``.
        device: The device type autocast runs on (``"cpu"``, ``"cuda"``, ``"mps"``, ...), or a device.
        scaler: The grad scaler for ``"16-mixed"``; by default a new ``torch.amp.GradScaler(device)``.

    Raises:
        InvalidConfigError: ``precision`` is not a mixed precision, or a scaler came with ``"bf16-mixed"``.
    """

    def __init__(self, precision: str, device: str | torch.device, scaler: GradScaler | None = None) -> None:
        if precision not in _DTYPES:  # in Lightning's words, which its users' code matches
            choices = [repr(name) for name in _DTYPES]
            raise InvalidConfigError(
                f"Passed `MixedPrecision(precision={precision!r})`. Precision must be {' or '.join(choices)}"
                f" (Valid choices: {', '.join(choices)}).",
                argument="precision",
                value=precision,
            )
        dtype = _DTYPES[precision]
        if scaler is not None and precision == "bf16-mixed":
            raise InvalidConfigError(
                f"`MixedPrecision(precision='bf16-mixed', scaler={scaler!r})`: `precision='bf16-mixed'` does not use a"
                f" scaler, found {scaler!r}; bf16 needs no loss scaling. "
                "Pass `scaler=None`, or use `precision='16-mixed'` to train with a scaler.",
                argument="scaler",
                value=scaler,
            )
        self.precision = precision
        self.dtype: Final = dtype
        self.device: Final = device.type if isinstance(device, torch.device) else str(device)
        if scaler is None and precision == "16-mixed":
            scaler = GradScaler(self.device)
        self._conversions = mixed_conversions(self.device, dtype)
        self.init_scaling(scaler)


# Lightning's private helper at this module's Lightning path (``plugins.precision.amp``).
def _optimizer_handles_unscaling(optimizer: Any) -> bool:
    """Whether ``optimizer.step`` unscales the gradients itself (torch's fused optimizers say so by a flag).

    The flag (``_step_supports_amp_scaling``) is a torch internal: reliable for torch's own optimizers only.
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


# Lightning Fabric's names that its own module at this path imports from its other modules.
