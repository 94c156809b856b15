"""The precision plugin of the DeepSpeed strategy: DeepSpeed's engine does the casting and the loss scaling."""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import torch
from torch import Tensor
from torch.nn import Module

from fabric_core.precision.float_cast import Conversions, FloatCastPrecision, supported

__all__ = ["SUPPORTED_PRECISIONS", "DeepSpeedPrecision"]

#: Lightning's type of the precisions DeepSpeed takes (:data:`SUPPORTED_PRECISIONS` as a type).
_PRECISION_INPUT: TypeAlias = Literal["32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"]

_DTYPES: Final[dict[str, torch.dtype]] = {
    "32-true": torch.float32,
    "16-mixed": torch.float16,
    "bf16-mixed": torch.bfloat16,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}
#: The precision strings DeepSpeed runs with.
SUPPORTED_PRECISIONS: Final = tuple(_DTYPES)


class DeepSpeedPrecision(FloatCastPrecision):
    """Precision under DeepSpeed: the strategy puts an ``fp16`` or ``bf16`` section in the DeepSpeed config.

    With that section DeepSpeed's engine keeps the parameters in half precision (and fp32 master weights in
    its optimizer for the ``-mixed`` precisions) and scales the fp16 loss itself. This plugin casts the
    inputs to the engine's dtype and the outputs back to ``torch.get_default_dtype()``, and routes backward
    and the optimizer step through the engine. ``"-true"`` precisions also create and convert the model in
    the half dtype.

    Args:
        precision: ``"32-true"``, ``"16-mixed"``, ``"bf16-mixed"``, ``"16-true"`` or ``"bf16-true"``.

    Raises:
        InvalidConfigError: Any other precision (``"64-true"`` among them: DeepSpeed has no fp64 mode).
    """

    def __init__(self, precision: str = "32-true") -> None:
        dtype = supported(_DTYPES, precision, f"`DeepSpeedPrecision(precision={precision!r})`", " in DeepSpeed")
        self.precision = precision
        self.dtype: Final = dtype
        #: Lightning's name for :attr:`dtype`.
        self._desired_dtype: Final = dtype
        # Inputs always go to the engine's dtype; only "-true" half precisions create and cast the module
        # in it (DeepSpeed casts the others itself). The forward has no context of its own.
        self._conversions = Conversions(
            input_dtype=dtype, output_to_default=True, module_dtype=dtype if self.is_true_half else None
        )

    @property
    def is_true_half(self) -> bool:
        """Whether parameters are created in the half dtype (``"16-true"``, ``"bf16-true"``)."""
        return self.precision.endswith("-true") and self.dtype is not torch.float32

    def backward(self, tensor: Tensor, model: Module | None, *args: Any, **kwargs: Any) -> None:
        """Run backward through the DeepSpeed engine, which scales the loss and reduces the gradients.

        Raises:
            TypeError: ``model`` is not a DeepSpeed engine (the strategy passes the one the loss came from).
        """
        if model is None or not callable(getattr(model, "backward", None)):
            raise TypeError(
                f"`DeepSpeedPrecision.backward` needs the DeepSpeed engine that computed the loss, got {model!r}. "
                "Call `fabric.backward(loss)` on a model set up with `fabric.setup(model, optimizer)`."
            )
        engine: Any = model
        engine.backward(tensor, *args, **kwargs)

    def optimizer_step(self, optimizer: Any, **kwargs: Any) -> Any:
        """Step through the DeepSpeed engine (the strategy passes the engine that owns the optimizer).

        Raises:
            TypeError: A ``closure`` was given: the engine's step re-evaluates nothing.
        """
        if kwargs.get("closure") is not None:
            raise TypeError(
                "DeepSpeed steps the optimizer through its engine, which does not take a closure: optimizers "
                "that need one (LBFGS) are not compatible with DeepSpeed."
            )
        kwargs.pop("closure", None)
        return optimizer.step(**kwargs)
