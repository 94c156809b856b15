"""Helpers for testing fabric-core and plugins.

Isolated plugin managers, fake distributions, a logger that records what it is given, the plugin contract
check, strategies connected to CPU devices, and multi-process jobs run in a session of their own.
"""

from __future__ import annotations

from fabric_core.testing._contract import check_plugin
from fabric_core.testing._dists import fake_distribution
from fabric_core.testing._jobs import run_in_own_session
from fabric_core.testing._loggers import RecordingLogger
from fabric_core.testing._managers import make_manager
from fabric_core.testing._strategies import connect_to_cpus

__all__ = [
    "RecordingLogger",
    "check_plugin", "connect_to_cpus", "fake_distribution", "make_manager",
    "run_in_own_session",
]
