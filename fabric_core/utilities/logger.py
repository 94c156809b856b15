"""Lightning's ``utilities.logger`` path.

In Lightning it holds only Lightning's private helpers that flatten and sanitise hyperparameters for its
loggers; fabric-core's loggers do this themselves. The module exists so that code importing the path keeps
importing.
"""

from __future__ import annotations

__all__: list[str] = []
