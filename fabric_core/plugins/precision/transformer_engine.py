"""Lightning's ``plugins.precision.transformer_engine`` path.

fabric-core ships no Transformer Engine precision (no first-party plugin provides one): the module exists so
that code importing it from this path gets a clear answer instead of a missing module.
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name == "TransformerEnginePrecision":
        raise AttributeError(
            "fabric-core has no TransformerEnginePrecision: no plugin provides NVIDIA Transformer Engine "
            "precision yet. Use precision='bf16-mixed' (or 'transformer-engine' from a third-party plugin "
            "that registers it); `fabric-core list-plugins` shows what is installed."
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
