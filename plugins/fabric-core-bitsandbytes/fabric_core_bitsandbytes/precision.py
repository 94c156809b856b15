"""Quantize a model's linear layers with bitsandbytes: 4-bit (nf4, fp4) or 8-bit (LLM.int8())."""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any, Final

import torch
from torch.nn import Module

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.float_cast import Conversions, FloatCastPrecision, true_conversions

# Lightning's private names at its ``plugins.precision.bitsandbytes`` path, which this module backs (hence unused
# here); none of them imports bitsandbytes before it is called.
from fabric_core_bitsandbytes._lightning import (  # noqa: F401
    _BITSANDBYTES_AVAILABLE,
    _convert_layers,
    _ignore_missing_weights_hook,
    _import_bitsandbytes,
    _quantize_on_load_hook,
    _replace_param,
)

__all__ = ["MODES", "BitsandbytesPrecision"]

log = logging.getLogger(__name__)

#: The quantization modes, in the order ``fabric-core list-plugins`` shows them.
MODES: Final = ("nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training")


class BitsandbytesPrecision(FloatCastPrecision):
    """Replace the model's ``nn.Linear`` layers with bitsandbytes' quantized ones.

    ``convert_module`` (run by ``fabric.setup``) swaps the layers and keeps their weights; bitsandbytes
    quantizes them when the model is moved to its device, which ``fabric.setup`` does next. On CPU and on
    CUDA. Models created inside ``fabric.init_module()`` get the quantized layers directly. Inputs are cast
    to ``dtype`` and the forward runs with ``dtype`` as the default; outputs come back in
    ``torch.get_default_dtype()``.

    Modes: ``"nf4"`` and ``"fp4"`` (4-bit ``Linear4bit``; ``-dq`` also quantizes the quantization
    statistics), ``"int8"`` (``Linear8bitLt`` with int8 weights, for inference) and ``"int8-training"``
    (``Linear8bitLt`` whose 16/32-bit weights stay trainable while the matmuls run in int8).

    Args:
        mode: One of :data:`MODES`.
        dtype: Compute dtype. Default: float16 for the int8 modes (the only one they support); for the
            4-bit modes bfloat16 where CUDA supports it, else float16.
        ignore_modules: Qualified-name prefixes of submodules whose layers stay as they are
            (``{"lm_head"}``).

    Raises:
        InvalidConfigError: An unknown mode, or an int8 mode with a dtype other than float16.
        ModuleNotFoundError: bitsandbytes is not installed.
    """

    def __init__(
        self, mode: str, dtype: torch.dtype | None = None, ignore_modules: Iterable[str] | None = None
    ) -> None:
        if mode not in MODES:
            raise InvalidConfigError(
                f"`BitsandbytesPrecision(mode={mode!r})` is not supported. Valid choices: "
                f"{', '.join(repr(m) for m in MODES)}.",
                argument="mode",
                value=mode,
            )
        if mode.startswith("int8") and dtype is not None and dtype is not torch.float16:
            raise InvalidConfigError(
                f"{mode!r} only works with `dtype=torch.float16`, but you chose `{dtype}`",
                argument="dtype",
                value=dtype,
            )
        self._layers: Any = importlib.import_module("fabric_core_bitsandbytes._layers")
        self.precision = mode
        self.mode: Final = mode
        self._dtype = dtype
        self.ignore_modules: Final = frozenset(ignore_modules or ())

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype (decided on first use: asking CUDA about bf16 must wait until after forking)."""
        if self._dtype is None:
            bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            self._dtype = torch.float16 if self.mode.startswith("int8") or not bf16 else torch.bfloat16
        return self._dtype

    @property
    def conversions(self) -> Conversions:
        """Inputs, the forward's default dtype and new tensors in the compute dtype; outputs cast back.

        Built on first use, with the compute dtype (``convert_module`` replaces the base's module cast).
        """
        if self._conversions.input_dtype is None:
            self._conversions = true_conversions(self.dtype)
        return self._conversions

    @property
    def linear_class(self) -> type[Module]:
        """The bitsandbytes layer class that replaces ``nn.Linear`` in this mode."""
        cls: type[Module] = self._layers.linear_class(self.mode, self.dtype)
        return cls

    def convert_module(self, module: Module) -> Module:
        """Swap the ``nn.Linear`` layers (outside ``ignore_modules``) for quantized ones, in place.

        A module that has quantized layers already (created in ``fabric.init_module()``) keeps them; the
        4-bit ones get this plugin's compute dtype. The floating-point parameters and buffers of the other
        modules (ignored layers, norms, embeddings) are cast to the compute dtype, which the forward runs in.

        Raises:
            TypeError: The module has no ``nn.Linear`` layer, so nothing would be quantized.
        """
        if not any(isinstance(m, torch.nn.Linear) for m in module.modules()):
            raise TypeError(
                "You are using the bitsandbytes precision plugin, but your model has no Linear layers. This plugin "
                "won't work for your model."
            )
        layers = self._layers
        if not any(isinstance(m, layers.QUANTIZED_LAYERS) for m in module.modules()):
            layers.replace_linear_layers(module, self.linear_class, self.dtype, self.ignore_modules)
        for m in module.modules():
            if isinstance(m, layers.Linear4bit):
                m.compute_dtype = self.dtype
            elif not isinstance(m, layers.QUANTIZED_LAYERS):
                _cast_own_tensors(m, self.dtype)
        return module

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Inside, ``torch.nn.Linear`` builds this mode's quantized layer, in the compute dtype.

        Raises:
            RuntimeError: ``ignore_modules`` is set: every layer created inside would be replaced.
        """
        if self.ignore_modules:
            raise RuntimeError(
                "Instantiating your model under the `init_module` context manager is not supported when used with "
                "`BitsandbytesPrecision(..., ignore_modules=...)` as this may initialize the layers on-device, "
                "defeating the purpose of quantization. You can remove `ignore_modules` or remove the `init_module` "
                "context manager."
            )
        stack = contextlib.ExitStack()
        stack.enter_context(self.tensor_init_context())
        stack.enter_context(_replaced_linear(self.linear_class))
        return stack


def _cast_own_tensors(module: Module, dtype: torch.dtype) -> None:
    """Cast the floating-point parameters and buffers that ``module`` itself holds (not its children's)."""
    for param in module.parameters(recurse=False):
        if param.is_floating_point():
            param.data = param.data.to(dtype)
    for name, buffer in module.named_buffers(recurse=False):
        if buffer.is_floating_point():
            module.register_buffer(name, buffer.to(dtype), persistent=name not in module._non_persistent_buffers_set)


@contextlib.contextmanager
def _replaced_linear(cls: type[Module]) -> Iterator[None]:
    original = torch.nn.Linear
    torch.nn.Linear = cls  # type: ignore[misc,assignment]  # the point: code calling nn.Linear(...) gets cls
    try:
        yield
    finally:
        torch.nn.Linear = original  # type: ignore[misc]
