"""Lightning's ``utilities.testing`` path.

In Lightning it holds only Lightning's private test helpers (``_runif_reasons``); fabric-core's are in
:mod:`fabric_core.testing`. The module exists so that code importing the path keeps importing.
"""

from __future__ import annotations

__all__: list[str] = []
