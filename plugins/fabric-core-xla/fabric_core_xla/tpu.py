"""Lightning's deprecated TPU module paths, all served by this one module as in Lightning.

``fabric_core.accelerators.tpu``, ``fabric_core.plugins.precision.tpu``, ``...precision.tpu_bf16``,
``...precision.xlabf16`` and ``fabric_core.strategies.single_tpu`` are this module (declared in
:mod:`fabric_core_xla._plugin`), so each of them gives every deprecated class. The classes live beside the XLA
class each one stands for and warn when built; importing a path does not warn, as in Lightning. No ``__all__``:
the packages above these paths find the classes in their own modules, not through this one.
"""

from __future__ import annotations

from fabric_core_xla.accelerator import TPUAccelerator as TPUAccelerator
from fabric_core_xla.precision import TPUBf16Precision as TPUBf16Precision
from fabric_core_xla.precision import TPUPrecision as TPUPrecision
from fabric_core_xla.precision import XLABf16Precision as XLABf16Precision
from fabric_core_xla.single_device import SingleTPUStrategy as SingleTPUStrategy
