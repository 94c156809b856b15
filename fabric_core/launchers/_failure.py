"""Whether this process is ending with an error: set by whoever sees the error, read at exit (torch-free).

A launcher's worker that raised and an uncaught exception both record it; the process group's exit
(``_distributed.exit_handshake``) reads it, so that a failed rank does not wait at a barrier for peers that may never
come. It lives here, below both, so that launchers never import the strategies that create them.
"""

from __future__ import annotations

__all__ = ["failed", "record_failure"]

_failed = False


def record_failure() -> None:
    """Note that this process is ending with an error (its peers may never reach another collective)."""
    global _failed
    _failed = True


def failed() -> bool:
    """Whether this process recorded an error (an uncaught exception, or a launcher's worker that raised)."""
    return _failed
