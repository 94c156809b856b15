"""Lightning's warning categories under its import path, and the switch that silences possible-mistake hints."""

from __future__ import annotations

import warnings

from fabric_core.errors import PossibleUserWarning

__all__ = ["PossibleUserWarning", "disable_possible_user_warnings"]


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore every :class:`PossibleUserWarning` (hints about likely, not certain, mistakes).

    Args:
        module: A regular expression the warning's module must match, e.g. ``"fabric_core.fabric"``; by default
            the warnings of every module are ignored. Use :func:`warnings.filterwarnings` for finer control.
    """
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)
