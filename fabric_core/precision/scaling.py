"""Loss scaling with a ``torch.amp.GradScaler``: one implementation for every fp16 precision plugin."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor
from torch.amp import GradScaler
from torch.nn import Module
from torch.optim import LBFGS, Optimizer

from fabric_core.precision.float_cast import PLAIN_HOOK_NAMES, FloatCastPrecision

__all__ = ["LossScaling"]


class LossScaling(FloatCastPrecision):
    """The training-step hooks of a float-cast precision that may scale the loss (``"16-mixed"``).

    Subclasses declare their conversions (``self._conversions``) and then call :meth:`init_scaling` with the
    scaler or ``None``. Without a scaler every step hook does what the base ``Precision`` does, and the
    conversions say so (``plain_hooks``) so that the wrappers skip them.
    """

    scaler: GradScaler | None

    def init_scaling(self, scaler: GradScaler | None) -> None:
        """Record the scaler (``None`` for no loss scaling)."""
        self.scaler = scaler
        if scaler is None:
            self._conversions = dataclasses.replace(self._conversions, plain_hooks=PLAIN_HOOK_NAMES)
        # torch raises if unscale_ runs twice between updates (e.g. clipping by norm, then by value).
        self._unscaled: set[int] = set()

    def backward(self, tensor: Tensor, model: Module | None, *args: Any, **kwargs: Any) -> None:
        """Run backward on the loss, scaled by the grad scaler when there is one.

        Scaling happens here rather than in :meth:`pre_backward` so that a strategy which calls only
        ``backward`` still scales the loss that :meth:`optimizer_step` will unscale.
        """
        if self.scaler is not None:
            tensor = self.scaler.scale(tensor)
        super().backward(tensor, model, *args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Step through the scaler (skipped when the gradients overflowed) and update the scale.

        Returns:
            What ``optimizer.step`` returned, or ``None`` when the step was skipped.

        Raises:
            TypeError: The optimizer is LBFGS, whose closure re-evaluates the loss outside the scaler.
        """
        if self.scaler is None:
            return optimizer.step(**kwargs)
        if isinstance(optimizer, LBFGS):
            raise TypeError("AMP and the LBFGS optimizer are not compatible.")
        output = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        self._unscaled.clear()
        return output

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Divide the gradients by the loss scale, at most once per optimizer step."""
        if self.scaler is None or id(optimizer) in self._unscaled:
            return
        self.scaler.unscale_(optimizer)
        self._unscaled.add(id(optimizer))

    def state_dict(self) -> dict[str, Any]:
        """The grad scaler's state (empty without one)."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the grad scaler's state."""
        if self.scaler is not None:
            self.scaler.load_state_dict(state_dict)
