"""Helpers for testing fabric-core and plugins: isolated managers and fake installed distributions."""

from __future__ import annotations

from fabric_core.testing._dists import fake_distribution
from fabric_core.testing._managers import make_manager

__all__ = ["fake_distribution", "make_manager"]
