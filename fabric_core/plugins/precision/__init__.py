"""``fabric_core.plugins.precision``: precision classes, the core's and installed plugins'.

Lightning's submodules are here too: ``precision``, ``double``, ``half``, ``amp``, ``utils`` and
``transformer_engine`` from the core; ``fsdp``, ``deepspeed``, ``bitsandbytes`` and ``xla`` from the plugins
that declare them (imported on first use).
"""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr
from fabric_core.plugins._paths import PRECISIONS

__getattr__, __dir__ = class_getattr(__name__, ("precision",), PRECISIONS)
