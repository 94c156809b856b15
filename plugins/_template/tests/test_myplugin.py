"""Tests a copied plugin keeps: selection by name, a real Fabric run, and the plugin contract."""

from __future__ import annotations

from pathlib import Path

import torch

from fabric_core import Fabric, spec
from fabric_core.testing import check_plugin, fake_distribution, make_manager
from fabric_core_myplugin import _plugin


def test_name_resolves_through_an_isolated_manager() -> None:
    manager = make_manager(("myplugin", _plugin))
    entry = manager.catalog.get("callback", "loss_history")
    assert (entry.plugin, entry.target) == ("myplugin", "fabric_core_myplugin.callback:LossHistory")
    fabric = Fabric(accelerator="cpu", callbacks=spec("loss_history", every_n_steps=2), plugin_manager=manager)
    assert fabric._callbacks[0].every_n_steps == 2


def test_callback_receives_losses_in_a_real_fabric() -> None:
    fabric = Fabric(accelerator="cpu", callbacks="loss_history", plugin_manager=make_manager(("myplugin", _plugin)))
    for step in range(3):
        fabric.call("on_train_batch_end", loss=torch.tensor(float(step)), step=step)
    assert fabric._callbacks[0].losses == [0.0, 1.0, 2.0]


def test_plugin_meets_the_contract(tmp_path: Path) -> None:
    group = "fabric_core_template.plugins"
    with fake_distribution(
        "fabric-core-myplugin", entry_points={"myplugin": "fabric_core_myplugin._plugin"}, group=group, root=tmp_path
    ):
        assert check_plugin("myplugin", group=group) == []
