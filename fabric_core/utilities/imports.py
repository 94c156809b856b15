"""Lightning's ``utilities.imports`` path: the platform and version flags its code tests.

Lightning's names are private (``_TORCH_GREATER_EQUAL_2_4``, ``_IS_WINDOWS``, ...); code that copied them
from Lightning finds the same values here.
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec

import torch

from fabric_core.utilities._requirements import RequirementCache, compare_version

__all__ = ["RequirementCache", "compare_version"]


def _installed_at_least(distribution: str, minimum: str) -> bool:
    """Whether ``distribution`` is installed at ``minimum`` or later, read from its metadata (nothing imported)."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version(distribution)) >= Version(minimum)
    except (PackageNotFoundError, InvalidVersion):
        return False


_IS_WINDOWS = platform.system() == "Windows"
# Interactive: a REPL or `python -i`; fork-based launching is what such sessions need.
_IS_INTERACTIVE = hasattr(sys, "ps1") or bool(sys.flags.interactive)
_NUMPY_AVAILABLE = find_spec("numpy") is not None
_PYTHON_GREATER_EQUAL_3_10_0 = sys.version_info >= (3, 10)
_TORCH_GREATER_EQUAL_2_2 = torch.__version__ >= "2.2.0"
_TORCH_GREATER_EQUAL_2_3 = torch.__version__ >= "2.3.0"
_TORCH_EQUAL_2_4_0 = torch.__version__.split("+")[0] == "2.4.0"
_TORCH_GREATER_EQUAL_2_4 = torch.__version__ >= "2.4.0"
_TORCH_GREATER_EQUAL_2_4_1 = torch.__version__ >= "2.4.1"
_TORCH_GREATER_EQUAL_2_5 = torch.__version__ >= "2.5.0"
_TORCH_GREATER_EQUAL_2_6 = torch.__version__ >= "2.6.0"
_TORCH_LESS_EQUAL_2_6 = torch.__version__ <= "2.6.0"
_TORCHMETRICS_GREATER_EQUAL_1_0_0 = _installed_at_least("torchmetrics", "1.0.0")
