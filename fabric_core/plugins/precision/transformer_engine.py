"""Lightning's ``plugins.precision.transformer_engine`` path.

``TransformerEnginePrecision``, the availability flag and the layer swap live in
:mod:`fabric_core.precision.transformer_engine` and are served here on first access (importing this path imports
no torch); building the precision needs ``transformer_engine``.
"""

from __future__ import annotations

from fabric_core._deferred import lightning_reexports, reexports

__all__: list[str] = []

_HOME = "fabric_core.precision.transformer_engine"
# The precision and its helpers (loaded on first access), then the names Lightning's module imports from its others.
__getattr__ = reexports(
    __name__,
    {name: _HOME for name in ("TransformerEnginePrecision", "_TRANSFORMER_ENGINE_AVAILABLE", "_convert_layers", "log")},
    fallback=lightning_reexports(__name__),
)
