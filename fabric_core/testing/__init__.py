"""Helpers for testing fabric-core and plugins: isolated managers, fake distributions, the contract check."""

from __future__ import annotations

from fabric_core.testing._contract import check_plugin
from fabric_core.testing._dists import fake_distribution
from fabric_core.testing._managers import make_manager

__all__ = ["check_plugin", "fake_distribution", "make_manager"]
