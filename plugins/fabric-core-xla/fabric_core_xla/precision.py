"""Precision on XLA devices: ``"32-true"``, ``"16-true"``, ``"bf16-true"``, stepped with ``xm.optimizer_step``."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Final, Literal, TypeAlias

import torch
from torch.nn import Module
from torch.optim import Optimizer

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.half import HalfPrecision
from fabric_core.precision.precision import Precision
from fabric_core.utilities.rank_zero import rank_zero_deprecation
from fabric_core_xla import accelerator, device
from fabric_core_xla._names import PRECISIONS

__all__ = ["TPUBf16Precision", "TPUPrecision", "XLABf16Precision", "XLAPrecision"]

# Lightning's flag at its ``plugins.precision.xla`` path (this module backs it), read here at call time.
_XLA_AVAILABLE = accelerator.XLA_AVAILABLE
#: Lightning's type of the precisions this plugin takes (``_names.PRECISIONS`` as a type).
_PRECISION_INPUT: TypeAlias = Literal["32-true", "16-true", "bf16-true"]

# Older torch_xla versions (before 2.7 for fp16, 2.8 for bf16) also cast every XLA tensor to the half
# type when these are set; newer ones ignore them, so the module is converted explicitly as well.
_ENV: Final = {"16-true": "XLA_USE_F16", "bf16-true": "XLA_USE_BF16"}


class XLAPrecision(Precision):
    """The precision plugin of the XLA strategies.

    ``"16-true"`` and ``"bf16-true"`` keep parameters, inputs and computation in fp16 or bf16 (as
    :class:`~fabric_core.precision.half.HalfPrecision` does) and also set ``XLA_USE_F16`` /
    ``XLA_USE_BF16`` for torch_xla versions that read them; :meth:`teardown` removes them. The optimizer
    step goes through ``xm.optimizer_step``, which averages the gradients of all processes, and ends the
    XLA step so the graph of one training step is compiled once and reused.

    Args:
        precision: ``"32-true"``, ``"16-true"`` or ``"bf16-true"``.

    Raises:
        InvalidConfigError: Another precision (mixed precision is not supported on XLA).
        ModuleNotFoundError: torch_xla is not installed (with the install command).
    """

    def __init__(self, precision: str = "32-true") -> None:
        if precision not in PRECISIONS:
            raise InvalidConfigError(
                # Lightning's sentence (its unbalanced parenthesis included: its tests match it), then ours.
                f"`precision={precision!r})` is not supported in XLA. `XLAPrecision` takes "
                f"{', '.join(repr(p) for p in PRECISIONS)}; mixed precision does not run on XLA devices.",
                argument="precision",
                value=precision,
            )
        device.require_torch_xla(type(self).__name__, _XLA_AVAILABLE)
        self.precision = precision
        self._compute: Final[Precision] = HalfPrecision(precision) if precision in _ENV else Precision()
        if precision in _ENV:
            os.environ[_ENV[precision]] = "1"

    @property
    def _desired_dtype(self) -> torch.dtype:
        """Lightning's name: the dtype of parameters and inputs (float32 for ``"32-true"``)."""
        dtype: torch.dtype = getattr(self._compute, "_desired_input_dtype", torch.float32)
        return dtype

    def convert_module(self, module: Module) -> Module:
        return self._compute.convert_module(module)

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self._compute.tensor_init_context()

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self._compute.module_init_context()

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return self._compute.forward_context()

    def convert_input(self, data: Any) -> Any:
        return self._compute.convert_input(data)

    def convert_output(self, data: Any) -> Any:
        return self._compute.convert_output(data)

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Average the gradients across processes, step, and end the XLA step.

        Returns:
            What ``optimizer.step`` returned.
        """
        import torch_xla.core.xla_model as xm

        return xm.optimizer_step(optimizer, barrier=True, optimizer_args=kwargs)

    def teardown(self) -> None:
        """Remove the environment variables this plugin set."""
        for name in _ENV.values():
            os.environ.pop(name, None)


def _deprecated(name: str) -> None:
    rank_zero_deprecation(
        f"The `{name}` class is deprecated. Use `fabric_core.plugins.precision.XLAPrecision` instead."
    )


class TPUPrecision(XLAPrecision):
    """Deprecated (as in Lightning): ``XLAPrecision("32-true")``."""

    def __init__(self) -> None:
        _deprecated("TPUPrecision")
        super().__init__("32-true")


class XLABf16Precision(XLAPrecision):
    """Deprecated (as in Lightning): ``XLAPrecision("bf16-true")``."""

    def __init__(self) -> None:
        _deprecated("XLABf16Precision")
        super().__init__("bf16-true")


class TPUBf16Precision(XLABf16Precision):
    """Deprecated (as in Lightning): ``XLAPrecision("bf16-true")``, warning as its base does too."""

    def __init__(self) -> None:
        _deprecated("TPUBf16Precision")
        super().__init__()
