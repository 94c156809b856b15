"""The installed distribution, its registrations and its selection hooks (no processes started)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from importlib import metadata

import pytest
import torch

from fabric_core._fabric.assembly import build
from fabric_core._kernel.manager import PluginManager
from fabric_core._kernel.registry import Registry, Spec
from fabric_core._kernel.selection import SelectionContext, select
from fabric_core.errors import FabricCoreWarning, InvalidConfigError
from fabric_core.testing import make_manager
from fabric_core_ddp import _plugin

CPU = torch.device("cpu")


def manager() -> PluginManager:
    return make_manager(("ddp", _plugin))


def registered() -> dict[str, object]:
    registry = Registry("strategy", "ddp")
    _plugin.fabric_core_register_strategies(registry=registry)
    return {n: e for e in registry.entries for n in (e.name, *e.aliases)}


def context(**changes: object) -> SelectionContext:
    base = SelectionContext(catalog=manager().catalog, device_type="cpu", parallel_devices=(CPU, CPU))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "ddp"]
    assert ep.value == "fabric_core_ddp._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-ddp"
    assert ep.load() is _plugin


def test_distribution_requires_only_the_core() -> None:
    assert metadata.requires("fabric-core-ddp") == ["fabric-core<0.2,>=0.1"]
    assert metadata.version("fabric-core-ddp") == "0.1.0"


@pytest.mark.parametrize(
    ("name", "defaults"),
    [
        ("ddp", {"start_method": "popen"}),
        ("ddp_spawn", {"start_method": "spawn"}),
        ("ddp_fork", {"start_method": "fork"}),
        ("ddp_notebook", {"start_method": "fork"}),
        ("ddp_find_unused_parameters_true", {"start_method": "popen", "find_unused_parameters": True}),
        ("ddp_find_unused_parameters_false", {"start_method": "popen", "find_unused_parameters": False}),
    ],
)
def test_ddp_names_and_their_defaults(name: str, defaults: dict[str, object]) -> None:
    entry = registered()[name]
    assert entry.target == "fabric_core_ddp.ddp:DDPStrategy"  # type: ignore[attr-defined]
    assert dict(entry.defaults) == defaults  # type: ignore[attr-defined]


def test_dp_is_registered() -> None:
    assert registered()["dp"].target == "fabric_core_ddp.dp:DataParallelStrategy"  # type: ignore[attr-defined]


@pytest.mark.timeout(60)
def test_registration_does_not_import_torch() -> None:
    code = "import sys, fabric_core_ddp._plugin; sys.exit(1 if 'torch' in sys.modules else 0)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_auto_with_two_devices_selects_ddp() -> None:
    selection = select(manager(), accelerator="cpu", devices=2)
    assert selection.context.strategy == "ddp"
    (decision,) = [d for d in selection.decisions if d.step == "strategy"]
    assert decision.plugin == "ddp"


def test_auto_in_an_interactive_session_selects_fork() -> None:
    assert _plugin.fabric_core_select_strategy("auto", context(interactive=True)) == "ddp_fork"


def test_auto_with_one_device_is_left_to_others() -> None:
    assert _plugin.fabric_core_select_strategy("auto", context(parallel_devices=(CPU,))) is None


def test_auto_on_several_nodes_selects_ddp() -> None:
    assert _plugin.fabric_core_select_strategy("auto", context(parallel_devices=(CPU,), num_nodes=2)) == "ddp"


def test_dp_on_cpu_warns_and_becomes_ddp() -> None:
    with pytest.warns(FabricCoreWarning, match=r"'dp' is not supported on CPUs, hence setting `strategy='ddp'`"):
        selection = select(manager(), accelerator="cpu", devices=2, strategy="dp")
    assert selection.context.strategy == "ddp"


def test_dp_on_cuda_stays_dp() -> None:
    assert _plugin.fabric_core_select_strategy("dp", context(device_type="cuda")) is None


def test_ddp_on_mps_is_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="not supported on the MPS accelerator"):
        _plugin.fabric_core_validate_selection(context(strategy="ddp_spawn", device_type="mps"))


def test_fork_where_the_platform_cannot_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.multiprocessing

    monkeypatch.setattr(torch.multiprocessing, "get_all_start_methods", lambda: ["spawn"])  # what torch answers
    with pytest.raises(InvalidConfigError, match="process forking is not supported on this platform"):
        _plugin.fabric_core_validate_selection(context(strategy="ddp_fork"))
    _plugin.fabric_core_validate_selection(context(strategy="ddp_spawn"))


@pytest.mark.parametrize(
    ("name", "launcher", "start_method"),
    [("ddp", "SubprocessScriptLauncher", "popen"), ("ddp_spawn", "MultiProcessingLauncher", "spawn")],
)
def test_built_strategy_has_the_launcher_of_its_start_method(name: str, launcher: str, start_method: str) -> None:
    strategy = build(select(manager(), accelerator="cpu", devices=2, strategy=name)).strategy
    assert type(strategy).__name__ == "DDPStrategy"
    assert strategy.start_method == start_method
    assert type(strategy.launcher).__name__ == launcher
    assert strategy.world_size == 2


def test_spec_options_reach_distributed_data_parallel() -> None:
    choice = Spec("ddp", {"static_graph": True, "bucket_cap_mb": 5})
    strategy = build(select(manager(), accelerator="cpu", devices=2, strategy=choice)).strategy
    assert strategy.ddp_kwargs == {"static_graph": True, "bucket_cap_mb": 5}
