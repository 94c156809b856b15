"""Lightning's ``connector`` path.

Lightning resolves ``Fabric(...)`` arguments in its private ``_Connector``; fabric-core does it in
:mod:`fabric_core._selection`, through the plugins' selection hooks (``fabric-core explain`` shows the
result). The module exists so that code importing the path keeps importing; it has no public names, as in
Lightning.
"""

from __future__ import annotations

__all__: list[str] = []
