"""Lightning's ``utilities.load`` path.

In Lightning it holds only Lightning's private lazy-loading and distributed-checkpoint helpers. fabric-core
reads sharded checkpoints with ``fabric_core.io.distributed`` (``load_distributed_checkpoint``,
``consolidate``). The module exists so that code importing the path keeps importing.
"""

from __future__ import annotations

__all__: list[str] = []
