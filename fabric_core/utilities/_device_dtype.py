"""A module that knows its own device and dtype (``module.device``, ``module.dtype``), kept up to date by ``.to()``.

Lightning's ``LightningModule`` has these properties through its private ``_DeviceDtypeModuleMixin``; code that
subclasses the mixin (``lightning.pytorch`` in the zero-edit mode) finds it at Lightning's path
:mod:`fabric_core.utilities.device_dtype_mixin`, which imports this module on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.nn import Module

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["_DeviceDtypeModuleMixin", "_update_properties"]


class _DeviceDtypeModuleMixin(Module):
    """A ``Module`` with ``device`` and ``dtype`` properties that follow ``to``, ``cuda``, ``cpu``, ``half``, ...

    Both start as torch's defaults at construction. Setting ``dtype`` directly raises ``RuntimeError``: use
    ``module.to(dtype)``.
    """

    __jit_unused_properties__: list[str] = ["device", "dtype"]

    def __init__(self) -> None:
        super().__init__()
        self._dtype: str | torch.dtype = torch.get_default_dtype()
        self._device = torch.get_default_device()

    @property
    def dtype(self) -> str | torch.dtype:
        """The dtype the module was last converted to."""
        return self._dtype

    @dtype.setter
    def dtype(self, new_dtype: str | torch.dtype) -> None:
        raise RuntimeError("Cannot set the dtype explicitly. Please use module.to(new_dtype).")

    @property
    def device(self) -> torch.device:
        """The device the module was last moved to; a CUDA device always with its index."""
        device = self._device
        if device.type == "cuda" and device.index is None:
            return torch.device(f"cuda:{torch.cuda.current_device()}")
        return device

    def to(self, *args: Any, **kwargs: Any) -> Self:
        """See :meth:`torch.nn.Module.to`."""
        device, dtype = torch._C._nn._parse_to(*args, **kwargs)[:2]
        _update_properties(self, device=device, dtype=dtype)
        return super().to(*args, **kwargs)

    def cuda(self, device: torch.device | int | None = None) -> Self:
        """See :meth:`torch.nn.Module.cuda`; ``None`` means the current CUDA device."""
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        elif isinstance(device, int):
            device = torch.device("cuda", index=device)
        _update_properties(self, device=device)
        return super().cuda(device=device)

    def cpu(self) -> Self:
        """See :meth:`torch.nn.Module.cpu`."""
        _update_properties(self, device=torch.device("cpu"))
        return super().cpu()

    def type(self, dst_type: str | torch.dtype) -> Self:
        """See :meth:`torch.nn.Module.type`."""
        _update_properties(self, dtype=dst_type)
        return super().type(dst_type=dst_type)

    def float(self) -> Self:
        """See :meth:`torch.nn.Module.float`."""
        _update_properties(self, dtype=torch.float)
        return super().float()

    def double(self) -> Self:
        """See :meth:`torch.nn.Module.double`."""
        _update_properties(self, dtype=torch.double)
        return super().double()

    def half(self) -> Self:
        """See :meth:`torch.nn.Module.half`."""
        _update_properties(self, dtype=torch.half)
        return super().half()


def _update_properties(
    root: Module, device: torch.device | None = None, dtype: str | torch.dtype | None = None
) -> None:
    """Record ``device`` and/or ``dtype`` on every :class:`_DeviceDtypeModuleMixin` in ``root`` (itself included).

    Only the recorded values change; no parameter is moved, so that modules with parameters on several devices
    (some on ``meta``, say) stay as they are.
    """
    for module in root.modules():
        if isinstance(module, _DeviceDtypeModuleMixin):
            if device is not None:
                module._device = device
            if dtype is not None:
                module._dtype = dtype
