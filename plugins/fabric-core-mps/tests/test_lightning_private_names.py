"""Lightning's private name of ``accelerators.mps``, called on both packages.

This machine is no Apple silicon Mac; where a test needs one, it patches the availability check of both
packages alike.
"""

from __future__ import annotations

import pytest

import fabric_core.accelerators.mps as ours
from fabric_core_mps import accelerator, device

lightning = pytest.importorskip("lightning_fabric.accelerators.mps")


def test_the_name_is_importable_from_the_lightning_path() -> None:
    from fabric_core.accelerators.mps import _get_all_available_mps_gpus

    assert _get_all_available_mps_gpus is accelerator.available_device_indices


def test_no_mps_device_here() -> None:
    assert ours._get_all_available_mps_gpus() == lightning._get_all_available_mps_gpus() == []


@pytest.mark.parametrize("available", [True, False])
def test_a_mac_has_one_mps_device(monkeypatch: pytest.MonkeyPatch, available: bool) -> None:
    monkeypatch.setattr(device, "is_available", lambda: available)
    monkeypatch.setattr(lightning.MPSAccelerator, "is_available", staticmethod(lambda: available))
    expected = [0] if available else []
    assert ours._get_all_available_mps_gpus() == lightning._get_all_available_mps_gpus() == expected
    if available:  # the accelerator parses devices against the same list
        assert ours.MPSAccelerator.parse_devices(-1) == expected
