"""A fabric-core plugin (template): a callback that records the losses passed to ``fabric.call``.

The implementation is loaded on first access of its name (``from fabric_core_myplugin import LossHistory``),
so importing this package, which every ``Fabric(...)`` does for the registration module, stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric_core.plugin_api import lazy_exports

if TYPE_CHECKING:
    from fabric_core_myplugin.callback import LossHistory

__all__ = ["LossHistory"]
__version__ = "0.1.0"

_WHERE = {"LossHistory": "fabric_core_myplugin.callback"}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
