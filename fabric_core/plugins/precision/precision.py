"""Lightning's ``plugins.precision.precision`` path: the base precision class and the precision input types.

The ``_PRECISION_INPUT*`` names are the type aliases Lightning annotates ``precision=`` with (``lightning.pytorch``
imports them from here); the spelling table behind ``_PRECISION_INPUT_STR_ALIAS_CONVERSION`` is
:data:`fabric_core._kernel.arguments.PRECISION_ALIASES`, the one that ``Fabric(precision=...)`` reads.
"""

from __future__ import annotations

from typing import Literal, Union

from fabric_core._deferred import lightning_reexports
from fabric_core._kernel.arguments import PRECISION_ALIASES
from fabric_core.precision.precision import Precision

__all__ = ["Precision"]

_PRECISION_INPUT_INT = Literal[64, 32, 16]
#: Historical spellings and what they mean (``"16"`` is ``"16-mixed"``).
_PRECISION_INPUT_STR_ALIAS_CONVERSION: dict[str, str] = {
    alias: canonical for alias, (canonical, _discouraged) in PRECISION_ALIASES.items()
}
_PRECISION_INPUT_STR_ALIAS = Literal["64", "32", "16", "bf16"]
_PRECISION_INPUT_STR = Literal[
    "transformer-engine",
    "transformer-engine-float16",
    "16-true",
    "16-mixed",
    "bf16-true",
    "bf16-mixed",
    "32-true",
    "64-true",
]
_PRECISION_INPUT = Union[_PRECISION_INPUT_INT, _PRECISION_INPUT_STR, _PRECISION_INPUT_STR_ALIAS]  # noqa: UP007

# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
