"""Collective operations a user runs on process groups they own (Lightning's ``plugins.collectives``)."""

from __future__ import annotations

from fabric_core.plugins.collectives.collective import Collective
from fabric_core.plugins.collectives.single_device import SingleDeviceCollective
from fabric_core.plugins.collectives.torch_collective import TorchCollective
from fabric_core.utilities.types import CollectibleGroup

__all__ = ["CollectibleGroup", "Collective", "SingleDeviceCollective", "TorchCollective"]
