"""Lightning's exception for a misuse of the API, under its import path."""

from __future__ import annotations

from fabric_core.errors import FabricCoreError

__all__ = ["MisconfigurationException"]


class MisconfigurationException(FabricCoreError):
    """The API was used in a way that cannot work (Lightning's name).

    fabric-core raises its own, more specific errors (:class:`~fabric_core.errors.InvalidConfigError` and
    friends); this class exists so that code written for Lightning that raises or catches it keeps working.
    """
