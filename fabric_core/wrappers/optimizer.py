"""``FabricOptimizer``: what ``fabric.setup`` returns for an optimizer; it steps through the strategy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from torch.optim import Optimizer

from fabric_core._signature import hooks
from fabric_core.strategies.strategy import Strategy
from fabric_core.utilities.types import Optimizable
from fabric_core.wrappers._plan import overrides, step_plan

__all__ = ["FabricOptimizer"]


_FABRIC_OPTIMIZER_CLASSES: Final[dict[type[Optimizer], type[FabricOptimizer]]] = {}


def _fabric_optimizer_class(optimizer_class: type[Optimizer]) -> type[FabricOptimizer]:
    # A subclass of both, so that `isinstance(opt, torch.optim.SGD)` holds and LR schedulers accept it.
    cls = _FABRIC_OPTIMIZER_CLASSES.get(optimizer_class)
    if cls is None:
        cls = type(f"Fabric{optimizer_class.__name__}", (FabricOptimizer, optimizer_class), {})
        _FABRIC_OPTIMIZER_CLASSES[optimizer_class] = cls
    return cls


class _FabricOptimizer(Optimizer):
    """The optimizer ``fabric.setup`` returns: steps through the strategy, then tells the callbacks.

    Its class is a subclass of the original optimizer's class, created once per optimizer class.
    ``param_groups``, ``state`` and ``defaults`` are the original's own objects, always, so LR schedulers
    and ``load_state_dict`` act on the optimizer that steps.

    Args:
        optimizer: The optimizer as the strategy set it up.
        strategy: The strategy that steps it.
        callbacks: Objects whose ``on_after_optimizer_step(strategy=..., optimizer=...)`` runs after each step.
    """

    # Not copied from the original: they must stay the original's (an LR scheduler may have patched `step`).
    _NOT_COPIED: Final = frozenset({"step", "state_dict", "param_groups", "state", "defaults", "__del__"})

    def __init__(self, optimizer: Optimizer, strategy: Strategy, callbacks: list[Any] | None = None) -> None:
        # Optimizer.__init__ is not called: the attributes are the original's.
        self.__dict__ = {k: v for k, v in optimizer.__dict__.items() if k not in self._NOT_COPIED}
        # `__class__`, not `type()`: what the optimizer presents itself as (a `Mock(spec=SGD)` is an SGD too).
        self.__class__ = _fabric_optimizer_class(optimizer.__class__)
        self._optimizer = optimizer
        self._strategy = strategy
        kwargs = {"strategy": strategy, "optimizer": optimizer}
        self._after_step: list[tuple[Callable[..., Any], dict[str, Any]]] = [
            (hook, {k: v for k, v in kwargs.items() if keywords is None or k in keywords})
            for hook, keywords in hooks(callbacks or (), "on_after_optimizer_step")
        ]
        # Lightning's contract: a strategy whose `model` is itself an optimizer steps that instead (asked per step).
        self._steps_model = hasattr(strategy, "model")
        # A strategy that replaces `optimizer_step` is simply called; only the stock one asks its precision.
        self._plain_step = (
            not self._steps_model
            and not overrides(strategy, Strategy, "optimizer_step")
            and step_plan(strategy).plain_step
        )
        # `zero_grad` only ever delegates: the original's bound method, as an instance attribute, answers the
        # call without a wrapper frame (a quarter of a microsecond per step).
        self.zero_grad = optimizer.zero_grad  # type: ignore[method-assign]

    @property
    def optimizer(self) -> Optimizer:
        """The optimizer as the strategy set it up."""
        return self._optimizer

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self._optimizer.param_groups = value

    @property
    def state(self) -> Any:
        return self._optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self._optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self._optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self._optimizer.defaults = value

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step the optimizer through the strategy and precision, then run ``on_after_optimizer_step``."""
        state = self.__dict__  # one slow lookup instead of two (this class has `__getattr__`)
        optimizer = state["_optimizer"]
        if state["_plain_step"]:
            output = optimizer.step() if closure is None else optimizer.step(closure)
        else:
            kwargs = {} if closure is None else {"closure": closure}
            strategy = state["_strategy"]
            if state["_steps_model"]:
                model = strategy.model
                if model is not None and isinstance(model, Optimizable):
                    optimizer = model
            output = strategy.optimizer_step(optimizer, **kwargs)
        for hook, hook_kwargs in state["_after_step"]:
            hook(**hook_kwargs)
        return output

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state as the strategy gathers it (whole, for optimizers sharded across ranks)."""
        return self._strategy.get_optimizer_state(self._optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._optimizer.add_param_group(param_group)

    def __getattr__(self, name: str) -> Any:
        # Attributes the original gained after wrapping.
        optimizer = self.__dict__.get("_optimizer")
        if optimizer is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return getattr(optimizer, name)


#: The public name. The class keeps Lightning's name, which code checks (``type(x).__name__ == "_FabricOptimizer"``).
FabricOptimizer = _FabricOptimizer
