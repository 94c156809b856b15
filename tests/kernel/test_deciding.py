"""Selection decides, the assembly builds: every way a component is given takes one path and is recorded."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from fabric_core._fabric.assembly import build
from fabric_core._kernel.manager import plugin_module
from fabric_core._kernel.selection import Selection, select
from fabric_core.errors import InvalidConfigError
from fabric_core.plugin_api import Decision, spec
from fabric_core.testing import make_manager


def decision(selection: Selection, step: str) -> Decision:
    return next(d for d in selection.decisions if d.step == step)


@pytest.mark.parametrize("given", ["bf16-mixed", spec("bf16-mixed")], ids=["name", "spec"])
def test_a_precision_named_in_plugins_takes_the_precision_path(given: Any) -> None:
    asked: list[str] = []

    def watch(requested: str, context: Any) -> None:
        asked.append(requested)

    manager = make_manager(plugin_module("watch", {"fabric_core_select_precision": watch}))
    via_plugins = select(manager, accelerator="cpu", plugins=[given])
    via_precision = select(manager, accelerator="cpu", precision=given)
    assert asked == ["bf16-mixed", "bf16-mixed"]  # the selection hooks ran for both
    by_plugins, by_precision = decision(via_plugins, "precision"), decision(via_precision, "precision")
    assert (by_plugins.value, by_plugins.hook, by_plugins.target) == (
        by_precision.value,
        by_precision.hook,
        by_precision.target,
    )
    assert by_plugins.hook == "builtin.fabric_core_select_precision"
    assert "plugins=" in by_plugins.reason and "plugins=" not in by_precision.reason
    assert via_plugins.precision.options == {"device": "cpu"}  # the device is injected on both paths
    assert build(via_plugins).precision.device == "cpu"


def test_instances_given_through_plugins_are_recorded_and_used() -> None:
    from fabric_core.environments.lightning import LightningEnvironment
    from fabric_core.io.torch_io import TorchCheckpointIO
    from fabric_core.precision.double import DoublePrecision

    io, env, precision = TorchCheckpointIO(), LightningEnvironment(), DoublePrecision()
    selection = select(make_manager(), accelerator="cpu", plugins=[io, env, precision])
    recorded = {d.step: (d.value, d.reason) for d in selection.decisions}
    assert recorded["checkpoint_io"] == ("TorchCheckpointIO", "instance passed in plugins=")
    assert recorded["environment"] == ("LightningEnvironment", "instance passed in plugins=")
    assert recorded["precision"] == ("DoublePrecision", "instance passed in plugins=")
    built = build(selection)
    assert built.checkpoint_io is io and built.precision is precision and built.cluster_environment is env


def test_an_environment_from_the_catalog_records_its_entry() -> None:
    named = decision(select(make_manager(), accelerator="cpu", plugins=["kubeflow"]), "environment")
    assert (named.value, named.plugin) == ("kubeflow", "builtin")
    assert named.target == "fabric_core.environments.kubeflow:KubeflowEnvironment"
    assert "plugins=" in named.reason
    detected = decision(select(make_manager(), accelerator="cpu"), "environment")
    assert (detected.value, detected.plugin) == ("lightning", "builtin")
    assert detected.target == "fabric_core.environments.lightning:LightningEnvironment"


def test_the_selection_module_decides_and_builds_nothing() -> None:
    import fabric_core._kernel.selection as selection_module

    assert not hasattr(Selection, "build")
    source = inspect.getsource(selection_module)
    assert ".connect(" not in source and "is_interactive_compatible" not in source


def test_building_refuses_a_spawning_strategy_in_an_interactive_session(monkeypatch: pytest.MonkeyPatch) -> None:
    from fabric_core_ddp import _plugin

    monkeypatch.setattr("fabric_core._kernel.selection._is_interactive", lambda: True)
    selection = select(make_manager(("ddp", _plugin)), accelerator="cpu", devices=2, strategy="ddp_spawn")
    assert selection.context.interactive  # deciding accepts it: whether it can run is known once it is built
    with pytest.raises(InvalidConfigError, match=r"strategy='ddp_spawn'.*not compatible with an interactive"):
        build(selection)


def test_an_unknown_plugins_item_is_not_called_a_plugin() -> None:
    from fabric_core.errors import UnknownNameError

    with pytest.raises(UnknownNameError) as info:
        select(make_manager(), accelerator="cpu", plugins=["bf17-mixed"])
    message = str(info.value)
    assert "the precision or cluster environment 'bf17-mixed'" in message and "Did you mean 'bf16-mixed'" in message
    assert "the plugin 'bf17-mixed'" not in message  # an item of plugins= is a component, not an installed plugin
