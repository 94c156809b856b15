"""Connecting a LightningModule to the ``Fabric`` that sets it up.

A LightningModule declares a ``_fabric`` attribute (``None`` until set up). When ``fabric.setup`` or
``fabric.setup_module`` sees one, the module gets the ``Fabric`` (``_fabric``) and, through ``setup``, the
wrapped optimizers (``_fabric_optimizers``), and becomes one of the callbacks. The LightningModule's own
code then does the rest: ``self.log`` calls ``self._fabric.log_dict``, ``self.fabric`` and ``self.logger``
read ``_fabric``, ``self.optimizers()`` returns ``_fabric_optimizers``, and ``fabric.call("on_train_start")``
reaches the module's hook; ``self.device`` is the device the model was set up on. Nothing here runs per
step: this is setup-time only.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch.nn import Module

__all__ = ["attach", "attach_optimizers"]


def attach(fabric: Any, model: Any, callbacks: list[Any], moved: bool) -> None:
    """Give the module the ``Fabric`` and make it a callback, if it is a LightningModule (has ``_fabric``).

    Called before the optimizers are wrapped, so that they see the module's ``on_after_optimizer_step``
    as the other callbacks'. A module set up twice, or also passed in ``Fabric(callbacks=...)``, is
    registered once. Submodules that track their device (``self.device`` of a LightningModule) learn it
    here too, also where the strategy placed the parameters without calling their ``.to()``.

    Args:
        fabric: The ``Fabric`` setting it up.
        model: The ``FabricModule`` just built around the user's module.
        callbacks: The ``Fabric``'s callback list, appended to in place.
        moved: Whether the model was moved to ``fabric.device`` (else its first parameter's device counts).
    """
    first = next(model.parameters(), None)
    _update_device(model, fabric.device if moved or first is None else first.device)
    module = model._original_module
    if not hasattr(module, "_fabric"):
        return
    module._fabric = fabric
    # By identity: `in` would compare with `==`, which a callback may define for other purposes.
    if not any(callback is module for callback in callbacks):
        callbacks.append(module)


def attach_optimizers(module: Any, optimizers: list[Any]) -> None:
    """Give a LightningModule set up through ``fabric.setup`` the wrapped optimizers (``self.optimizers()``).

    Args:
        module: The ``FabricModule`` that ``setup`` returns.
        optimizers: The ``FabricOptimizer`` objects ``setup`` returns, in order (the list is stored itself,
            possibly empty, as Lightning stores it).
    """
    original = module._original_module
    if hasattr(original, "_fabric"):
        original._fabric_optimizers = optimizers


def _update_device(root: Module, device: torch.device) -> None:
    # Lightning's `_DeviceDtypeModuleMixin` (a LightningModule's base) keeps `_device` for `self.device`;
    # it is set directly, not through `.to()`, which would move parameters that are meant to stay (meta).
    for module in root.modules():
        if any(cls.__name__ == "_DeviceDtypeModuleMixin" for cls in type(module).__mro__):
            cast(Any, module)._device = device
