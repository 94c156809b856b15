"""Lightning's ``plugins.precision.utils`` path: helpers precision classes share.

The public ones are fabric-core's (:func:`convert_floating_tensors`, :func:`default_dtype`); Lightning's private
ones live in :mod:`fabric_core.precision.utils`.
"""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports
from fabric_core.precision.precision import convert_floating_tensors, default_dtype
from fabric_core.precision.utils import _ClassReplacementContextManager as _ClassReplacementContextManager
from fabric_core.precision.utils import _convert_fp_tensor as _convert_fp_tensor
from fabric_core.precision.utils import _DtypeContextManager as _DtypeContextManager

__all__ = ["convert_floating_tensors", "default_dtype"]

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
