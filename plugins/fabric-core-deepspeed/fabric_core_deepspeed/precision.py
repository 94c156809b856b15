"""The precision plugin of the DeepSpeed strategy: DeepSpeed's engine does the casting and the loss scaling."""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Final

import torch
from torch import Tensor
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import (
    TO_DEFAULT_DTYPE,
    Precision,
    casts_floats_to,
    convert_floating_tensors,
    default_dtype,
)

__all__ = ["SUPPORTED_PRECISIONS", "DeepSpeedPrecision"]

_DTYPES: Final[dict[str, torch.dtype]] = {
    "32-true": torch.float32,
    "16-mixed": torch.float16,
    "bf16-mixed": torch.bfloat16,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}
#: The precision strings DeepSpeed runs with.
SUPPORTED_PRECISIONS: Final = tuple(_DTYPES)


class DeepSpeedPrecision(Precision):
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
        dtype = _DTYPES.get(precision)
        if dtype is None:
            raise InvalidConfigError(
                f"`precision={precision!r}` is not supported in DeepSpeed. `precision` must be one of: "
                f"{', '.join(repr(p) for p in SUPPORTED_PRECISIONS)}.",
                argument="precision",
                value=precision,
            )
        self.precision = precision
        self.dtype: Final = dtype

    @property
    def is_true_half(self) -> bool:
        """Whether parameters are created in the half dtype (``"16-true"``, ``"bf16-true"``)."""
        return self.precision.endswith("-true") and self.dtype is not torch.float32

    def convert_module(self, module: Module) -> Module:
        """Cast the module to the half dtype for ``"-true"`` precisions (DeepSpeed casts the others)."""
        return module.to(dtype=self.dtype) if self.is_true_half else module

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """For ``"-true"`` precisions, new tensors default to the half dtype."""
        return default_dtype(self.dtype) if self.is_true_half else contextlib.nullcontext()

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self.tensor_init_context()

    @casts_floats_to(operator.attrgetter("dtype"))
    def convert_input(self, data: Any) -> Any:
        """Cast floating-point inputs to the dtype of the engine's parameters."""
        return convert_floating_tensors(data, self.dtype)

    @TO_DEFAULT_DTYPE
    def convert_output(self, data: Any) -> Any:
        """Cast floating-point outputs back to ``torch.get_default_dtype()``."""
        return convert_floating_tensors(data, torch.get_default_dtype())

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
