"""Isolated plugin managers for tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabric_core._kernel.manager import PluginManager

__all__ = ["make_manager"]


def make_manager(
    *plugins: Any,
    autoload: bool = False,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> PluginManager:
    """Build a :class:`PluginManager` that sees only what the test gives it.

    Args:
        *plugins: Plugin modules or objects (with ``@hookimpl`` functions) to register, unless given as
            ``(name, plugin)`` pairs named after their module: ``fabric_core_ddp._plugin`` is ``"ddp"``,
            ``my_pkg.hooks`` is ``"hooks"``.
        autoload: Also load installed entry-point plugins (off: the test controls everything).
        environ: The switches' environment; empty by default so the caller's ``FABRIC_CORE_*`` never leak in.
        **options: Passed to :class:`PluginManager` (``allow=``, ``block=``, ``strict=``, ``group=``).

    Returns:
        A fresh manager; nothing global is touched.
    """
    named: dict[str, object] = {}
    for plugin in plugins:
        if isinstance(plugin, tuple):
            name, obj = plugin
        else:
            name, obj = _plugin_name(getattr(plugin, "__name__", type(plugin).__name__)), plugin
        if name in named:
            raise ValueError(f"make_manager: two plugins named {name!r}; pass (name, plugin) pairs.")
        named[name] = obj
    return PluginManager(autoload=autoload, plugins=named, environ=dict(environ or {}), **options)


def _plugin_name(module: str) -> str:
    """``fabric_core_ddp._plugin`` -> ``ddp``; ``pkg.hooks`` -> ``hooks``."""
    parts = module.split(".")
    if len(parts) > 1 and parts[-1].startswith("_"):
        return parts[0].removeprefix("fabric_core_")
    return parts[-1]
