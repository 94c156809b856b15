"""What ``fabric.setup*`` returns: the user's module, optimizer and dataloader, wrapped.

The wrappers sit inside every training step, so each decides once, when it is built, what its step must
do (:mod:`fabric_core.wrappers._plan`): with full precision and a strategy that changes neither backward nor
the optimizer step, a forward is one extra Python call and an optimizer step a direct call of the real one.

- :mod:`~fabric_core.wrappers.module`: ``FabricModule``; its call is the fast path in ``_fast_path``, the
  one module that relies on torch's internals.
- :mod:`~fabric_core.wrappers.optimizer`: ``FabricOptimizer``.
- :mod:`~fabric_core.wrappers.dataloader`: ``FabricDataLoader``.
- :mod:`~fabric_core.wrappers.unwrap`: taking wrappers and ``torch.compile`` off.
"""

from __future__ import annotations

from fabric_core._signature import accepted_keywords
from fabric_core.wrappers._guard import backward_state
from fabric_core.wrappers._plan import StepPlan, overrides, step_plan
from fabric_core.wrappers.dataloader import FabricDataLoader
from fabric_core.wrappers.module import STEP_METHODS, FabricModule
from fabric_core.wrappers.optimizer import FabricOptimizer
from fabric_core.wrappers.unwrap import (
    is_wrapped,
    recompile,
    unwrap_compiled,
    unwrap_for_checkpoint,
    unwrap_objects,
)

__all__ = [
    "STEP_METHODS",
    "FabricDataLoader",
    "FabricModule",
    "FabricOptimizer",
    "StepPlan",
    "accepted_keywords",
    "backward_state",
    "is_wrapped",
    "overrides",
    "recompile",
    "step_plan",
    "unwrap_compiled",
    "unwrap_for_checkpoint",
    "unwrap_objects",
]

_unwrap_objects = unwrap_objects  # Lightning's name, which its examples import

# Lightning's private names, for code that checks `isinstance(x, _FabricModule)`.
_FabricModule = FabricModule
_FabricOptimizer = FabricOptimizer
_FabricDataLoader = FabricDataLoader
