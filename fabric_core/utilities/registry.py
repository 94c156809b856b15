"""Lightning's ``utilities.registry`` path.

In Lightning it holds only Lightning's private helpers that load callbacks from entry points; in fabric-core
plugins register components through :mod:`fabric_core.hookspecs`. The module exists so that code importing the
path keeps importing.
"""

from __future__ import annotations

__all__: list[str] = []
