"""Structured log events for kernel decisions (structlog), silent unless ``FABRIC_CORE_LOG`` asks.

``FABRIC_CORE_LOG=debug|info|warning`` sets the level; ``FABRIC_CORE_LOG_FORMAT=json`` writes one JSON
object per line instead of the console format. structlog is imported only when logging is on, and the
global structlog configuration of the user's program is never touched.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Final

__all__ = ["log_event"]

_LEVELS: Final = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
_FORMATS: Final = ("console", "json")
_logger: Any = None
_configured_for: tuple[str, str] | None = None
_told: set[tuple[str, str]] = set()


def _tell_once(variable: str, value: str, what: str, choices: Any, then: str) -> None:
    """One line on stderr per bad value and process: the switch is ignored, but never silently."""
    if (variable, value) in _told:
        return
    _told.add((variable, value))
    sys.stderr.write(f"fabric-core: {variable}={value!r} is not a {what}; use one of {', '.join(choices)} ({then}).\n")


def _get_logger() -> Any:
    global _logger, _configured_for
    raw_level = os.environ.get("FABRIC_CORE_LOG", "")
    level_name = raw_level.strip().lower()
    raw_fmt = os.environ.get("FABRIC_CORE_LOG_FORMAT", "console")
    fmt = raw_fmt.strip().lower()
    if level_name not in _LEVELS:
        if level_name:  # set but blank means off, like unset
            _tell_once("FABRIC_CORE_LOG", raw_level, "log level", _LEVELS, "logging stays off")
        return None
    if fmt not in _FORMATS:
        _tell_once("FABRIC_CORE_LOG_FORMAT", raw_fmt, "log format", _FORMATS, "using console")
        fmt = "console"
    if _configured_for != (level_name, fmt):
        import structlog

        renderer: Any = (
            structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
        )
        _logger = structlog.wrap_logger(
            structlog.PrintLogger(file=sys.stderr),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso"),
                renderer,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level_name]),
            logger_name="fabric_core",
        )
        _configured_for = (level_name, fmt)
    return _logger


def log_event(event: str, level: str = "debug", **fields: Any) -> None:
    """Emit one structured event, e.g. ``log_event("plugin_loaded", plugin="ddp", version="0.1.0")``.

    Costs one environment lookup when logging is off.
    """
    if "FABRIC_CORE_LOG" not in os.environ:
        return
    logger = _get_logger()
    if logger is not None:
        getattr(logger, level)(event, **fields)
