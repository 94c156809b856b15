"""Lightning's warning categories under its import path, and the switch that silences possible-mistake hints."""

from __future__ import annotations

import warnings
from pathlib import Path

from fabric_core._deferred import lightning_reexports
from fabric_core.errors import PossibleUserWarning

__all__ = ["PossibleUserWarning", "disable_possible_user_warnings"]

# The formatter in place when this module was imported, which ``_custom_format_warning`` falls back to.
_default_format_warning = warnings.formatwarning


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore every :class:`PossibleUserWarning` (hints about likely, not certain, mistakes).

    Args:
        module: A regular expression the warning's module must match, e.g. ``"fabric_core.fabric"``; by default
            the warnings of every module are ignored. Use :func:`warnings.filterwarnings` for finer control.
    """
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)


def _custom_format_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    """``warnings.formatwarning`` without the source line for warnings raised from this package or Lightning's.

    Such warnings come from the ``rank_zero`` helpers, whose source line says nothing to the user. Nothing
    installs it: assign it to ``warnings.formatwarning`` to use it (Lightning does so on import).
    """
    if _is_path_in_lightning(Path(filename)):
        return f"{filename}:{lineno}: {message}\n"
    return _default_format_warning(message, category, filename, lineno, line)


def _is_path_in_lightning(path: Path) -> bool:
    """Whether ``path`` looks like a file of this package or of Lightning's (a check on the absolute path's text)."""
    text = str(path.absolute())
    return "lightning" in text or "fabric_core" in text


# Lightning Fabric's names that its own module at this path imports from its other modules.
__getattr__ = lightning_reexports(__name__)
