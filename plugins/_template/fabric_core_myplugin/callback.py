"""The implementation, imported only when a user selects ``callbacks="loss_history"``."""

from __future__ import annotations

from typing import Any


class LossHistory:
    """Keeps the losses of ``fabric.call("on_train_batch_end", loss=loss)`` as Python floats."""

    def __init__(self, every_n_steps: int = 1) -> None:
        self.every_n_steps = every_n_steps
        self.losses: list[float] = []
        self._calls = 0

    def on_train_batch_end(self, loss: Any) -> None:
        self._calls += 1
        if self._calls % self.every_n_steps == 0:
            self.losses.append(float(loss))
