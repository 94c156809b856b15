"""Precision under FSDP2: an FSDP ``MixedPrecisionPolicy`` plus what the core's precisions do around it."""

from __future__ import annotations

from typing import Final, Literal

import torch
from torch.amp import GradScaler
from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.float_cast import NO_CONVERSIONS, mixed_conversions, supported, true_conversions
from fabric_core.precision.scaling import LossScaling
from fabric_core.utilities.rank_zero import rank_zero_warn

__all__ = ["FSDPPrecision"]

#: Lightning's name for the precisions ``FSDPPrecision`` takes.
_PRECISION_INPUT = Literal["32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"]

# precision -> (compute dtype, whether parameters themselves are stored in it)
_MODES: Final[dict[str, tuple[torch.dtype, bool]]] = {
    "32-true": (torch.float32, True),
    "bf16-mixed": (torch.bfloat16, False),
    "16-mixed": (torch.float16, False),
    "bf16-true": (torch.bfloat16, True),
    "16-true": (torch.float16, True),
}


class FSDPPrecision(LossScaling):
    """The precision plugin of :class:`~fabric_core_fsdp.FSDPStrategy`.

    * ``"32-true"``: everything in float32; no policy.
    * ``"bf16-mixed"`` / ``"16-mixed"``: the sharded parameters stay float32 (the optimizer updates them);
      FSDP all-gathers them in bf16/fp16 for forward and backward (``MixedPrecisionPolicy(param_dtype=...)``)
      and reduces gradients in float32. The forward also runs under ``torch.autocast`` so that tensors the
      model creates itself, and numerically sensitive ops, get the right dtype. ``"16-mixed"`` scales the loss
      with a ``ShardedGradScaler``, as in Lightning: its unscale all-reduces the inf/NaN check over the
      processes, so every rank skips the same steps (FSDP2's DTensor gradients are reduced over the mesh as
      well: a plain ``torch.amp.GradScaler`` would do, at one scalar all-reduce less per step).
    * ``"bf16-true"`` / ``"16-true"``: the module is cast to bf16/fp16 before sharding and stays there
      (no float32 master weights: small updates can be lost).

    Args:
        precision: One of ``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``, ``"bf16-true"``, ``"16-true"``.
        scaler: The grad scaler for ``"16-mixed"``; by default ``ShardedGradScaler(device)``. A plain
            ``torch.amp.GradScaler`` works too under FSDP2.
        device: The device type autocast runs on (``"cuda"``, ``"cpu"``), or a device.

    Raises:
        InvalidConfigError: An unsupported ``precision``, or a scaler with a precision other than ``"16-mixed"``.
    """

    def __init__(
        self, precision: str = "32-true", scaler: GradScaler | None = None, *, device: str | torch.device = "cuda"
    ):
        mode = supported(_MODES, precision, f"`FSDPPrecision(precision={precision!r})`", " in FSDP")
        if scaler is not None and precision != "16-mixed":
            raise InvalidConfigError(
                f"`FSDPPrecision(precision={precision!r}, scaler=...)`: `precision={precision!r}` does not use a "
                "scaler; only '16-mixed' scales the loss. Pass `scaler=None`, or use `precision='16-mixed'`.",
                argument="scaler",
                value=scaler,
            )
        self.precision = precision
        self.dtype: Final = mode[0]
        self.is_true: Final = mode[1]
        self.device: Final = device.type if isinstance(device, torch.device) else str(device)
        if scaler is None and precision == "16-mixed":
            scaler = ShardedGradScaler(self.device)
        if self.dtype == torch.float32:  # nothing to convert and no autocast: the wrappers call the module directly
            self._conversions = NO_CONVERSIONS
        elif self.is_true:  # cast before sharding, and stay there
            self._conversions = true_conversions(self.dtype)
        else:  # float32 parameters, gathered in the half dtype by FSDP; the forward under autocast
            self._conversions = mixed_conversions(self.device, self.dtype)
        self.init_scaling(scaler)

    @property
    def mixed_precision_policy(self) -> MixedPrecisionPolicy | None:
        """The policy given to ``fully_shard``; ``None`` where parameters are used in the dtype they are stored in."""
        if self.is_true:
            return None
        return MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=torch.float32)

    @property
    def mixed_precision_config(self) -> MixedPrecision:
        """Lightning's FSDP1 ``MixedPrecision`` for this precision: parameters, gradient reduction and buffers
        all in its dtype (what ``FSDP1Strategy`` wraps with). Under FSDP2 the mixed precisions reduce gradients
        in float32 instead (:attr:`mixed_precision_policy`; ``FSDPStrategy.mixed_precision_config`` says so).

        Warns, as Lightning does, that ``"16-true"`` and ``"bf16-true"`` compute in the lower precision.
        """
        if self.is_true and self.dtype != torch.float32:
            rank_zero_warn(
                f"FSDP with `{self.precision}` enables computation in lower precision. "
                "FSDP will always retain a full-precision copy of the model parameters for sharding.",
                category=UserWarning,
            )
        return MixedPrecision(param_dtype=self.dtype, reduce_dtype=self.dtype, buffer_dtype=self.dtype)
