"""``fabric_core.plugins.io``: checkpoint I/O classes.

Lightning's submodules: ``checkpoint_io`` and ``torch_io`` from the core; ``xla`` from the plugin that
declares it.
"""

from __future__ import annotations

from fabric_core._lightning.paths.package_classes import class_getattr
from fabric_core.plugins._paths import IO

__getattr__, __dir__ = class_getattr(__name__, (), IO)
