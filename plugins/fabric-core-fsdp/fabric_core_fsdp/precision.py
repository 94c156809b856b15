"""Precision under FSDP2: an FSDP ``MixedPrecisionPolicy`` plus what the core's precisions do around it."""

from __future__ import annotations

import contextlib
from typing import Any, Final

import torch
from torch.amp import GradScaler
from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import convert_floating_tensors, default_dtype
from fabric_core.precision.scaling import LossScaling

__all__ = ["FSDPPrecision"]

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
      with a ``torch.amp.GradScaler``: FSDP2 gradients are DTensors, and DTensor's unscale reduces the
      inf/NaN check over the mesh, so every rank skips the same steps (no FSDP1 ``ShardedGradScaler``
      needed).
    * ``"bf16-true"`` / ``"16-true"``: the module is cast to bf16/fp16 before sharding and stays there
      (no float32 master weights: small updates can be lost).

    Args:
        precision: One of ``"32-true"``, ``"bf16-mixed"``, ``"16-mixed"``, ``"bf16-true"``, ``"16-true"``.
        device: The device type autocast runs on (``"cuda"``, ``"cpu"``), or a device.
        scaler: The grad scaler for ``"16-mixed"``; by default ``torch.amp.GradScaler(device)``. The
            ``ShardedGradScaler`` that Lightning code passes works the same (it is a ``GradScaler``).

    Raises:
        InvalidConfigError: An unsupported ``precision``, or a scaler with a precision other than ``"16-mixed"``.
    """

    def __init__(
        self, precision: str = "32-true", device: str | torch.device = "cuda", scaler: GradScaler | None = None
    ):
        mode = _MODES.get(precision)
        if mode is None:
            raise InvalidConfigError(
                f"`FSDPPrecision(precision={precision!r})` is not supported. "
                f"Valid choices: {', '.join(repr(name) for name in _MODES)}.",
                argument="precision",
                value=precision,
            )
        if scaler is not None and precision != "16-mixed":
            raise InvalidConfigError(
                f"`FSDPPrecision(precision={precision!r}, scaler=...)`: only '16-mixed' scales the loss. "
                "Pass `scaler=None`, or use `precision='16-mixed'`.",
                argument="scaler",
                value=scaler,
            )
        self.precision = precision
        self.dtype: Final = mode[0]
        self.is_true: Final = mode[1]
        self.device: Final = device.type if isinstance(device, torch.device) else str(device)
        if scaler is None and precision == "16-mixed":
            scaler = GradScaler(self.device)
        self.init_scaling(scaler)
        if precision == "32-true":
            # Nothing to convert and no autocast: the wrappers call the module directly.
            self.plain_hooks = self.plain_hooks | {"convert_input", "convert_output", "forward_context"}

    @property
    def mixed_precision_policy(self) -> MixedPrecisionPolicy | None:
        """The policy given to ``fully_shard``; ``None`` where parameters are used in the dtype they are stored in."""
        if self.is_true:
            return None
        return MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=torch.float32)

    @property
    def mixed_precision_config(self) -> MixedPrecision:
        """The dtypes in use, as torch's (FSDP1) ``MixedPrecision`` (the type Lightning's plugin reports).

        The "true" precisions hold everything in their dtype. The mixed ones gather parameters in the half
        dtype but reduce gradients in float32 and leave buffers as they are (``buffer_dtype=None``); Lightning's
        FSDP1 plugin reduces and keeps buffers in the half dtype instead.
        """
        if self.is_true:
            return MixedPrecision(param_dtype=self.dtype, reduce_dtype=self.dtype, buffer_dtype=self.dtype)
        return MixedPrecision(param_dtype=self.dtype, reduce_dtype=torch.float32, buffer_dtype=None)

    # -- modules and tensors -------------------------------------------------------------------------------
    def convert_module(self, module: Module) -> Module:
        """Cast the module to bf16/fp16 for the "true" half precisions; otherwise leave it in float32."""
        if self.is_true and self.dtype != torch.float32:
            return module.to(dtype=self.dtype)
        return module

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """For the "true" half precisions, tensors created inside default to the half dtype."""
        if self.is_true and self.dtype != torch.float32:
            return default_dtype(self.dtype)
        return contextlib.nullcontext()

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Autocast for the mixed precisions; the default dtype set to the half dtype for the "true" ones."""
        if not self.is_true:
            return torch.autocast(self.device, dtype=self.dtype)
        return self.tensor_init_context()

    def convert_input(self, data: Any) -> Any:
        """Cast floating-point inputs to the compute dtype (FSDP would do it for the root module anyway)."""
        if self.dtype == torch.float32:
            return data
        return convert_floating_tensors(data, self.dtype)

    def convert_output(self, data: Any) -> Any:
        """Cast floating-point outputs back to ``torch.get_default_dtype()``."""
        if self.dtype == torch.float32:
            return data
        return convert_floating_tensors(data, torch.get_default_dtype())
