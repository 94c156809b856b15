"""Boolean switches read from the environment, the one spelling every layer accepts (torch-free leaf)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from fabric_core.errors import InvalidConfigError

__all__ = ["env_flag"]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


def env_flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    """Read a boolean switch: ``1/true/yes`` or ``0/false/no`` (case-insensitive).

    Raises:
        InvalidConfigError: Any other value, naming the variable and the valid spellings.
    """
    raw = environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidConfigError(
        f"{name}={raw!r} is not a boolean. Use one of 1, true, yes (on) or 0, false, no (off).",
        argument=name,
        value=raw,
    )
