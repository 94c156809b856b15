"""The installed distribution, its registrations, and how selection picks DeepSpeed's precision (no processes)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from typing import Any

import pytest
import torch

from fabric_core import spec
from fabric_core._fabric.assembly import build
from fabric_core._kernel.registry import Registry
from fabric_core._kernel.selection import select
from fabric_core.errors import FabricCoreWarning, InvalidConfigError, UnknownNameError
from fabric_core.precision.double import DoublePrecision
from fabric_core.testing import make_manager
from fabric_core_deepspeed import _plugin
from fabric_core_deepspeed.precision import SUPPORTED_PRECISIONS, DeepSpeedPrecision
from fabric_core_deepspeed.strategy import DeepSpeedStrategy


def choose(**kwargs: Any) -> Any:
    return select(make_manager(("deepspeed", _plugin)), accelerator="cpu", devices=2, **kwargs)


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "deepspeed"]
    assert ep.value == "fabric_core_deepspeed._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-deepspeed"
    assert ep.load() is _plugin


def test_distribution_requires_the_core_and_deepspeed() -> None:
    requires = metadata.requires("fabric-core-deepspeed") or []
    assert sorted(requires) == ["deepspeed>=0.14", "fabric-core<0.2,>=0.1"]


def test_registers_every_strategy_name_with_its_defaults() -> None:
    registry = Registry("strategy", "deepspeed")
    _plugin.fabric_core_register_strategies(registry=registry)
    entries = {e.name: e for e in registry.entries}
    stages = [f"deepspeed_stage_{n}" for n in (1, 2, 3)]
    offloaded = [f"{name}_offload" for name in stages] + ["deepspeed_stage_3_offload_nvme"]
    assert sorted(entries) == sorted(["deepspeed", *stages, *offloaded])
    assert all(e.target == "fabric_core_deepspeed.strategy:DeepSpeedStrategy" for e in entries.values())
    assert all(e.requires == ("deepspeed",) and e.missing_requirements() == [] for e in entries.values())
    assert dict(entries["deepspeed"].defaults) == {}
    assert dict(entries["deepspeed_stage_3_offload"].defaults) == {
        "stage": 3, "offload_optimizer": True, "offload_parameters": True}  # fmt: skip
    nvme = dict(entries["deepspeed_stage_3_offload_nvme"].defaults)
    assert nvme["remote_device"] == nvme["offload_params_device"] == nvme["offload_optimizer_device"] == "nvme"


def test_registers_one_precision_entry_per_supported_precision() -> None:
    registry = Registry("precision", "deepspeed")
    _plugin.fabric_core_register_precisions(registry=registry)
    assert [e.name for e in registry.entries] == [f"deepspeed-{p}" for p in SUPPORTED_PRECISIONS]
    assert _plugin.PRECISIONS == SUPPORTED_PRECISIONS
    built = registry.entries[2].build()
    assert isinstance(built, DeepSpeedPrecision) and built.precision == "bf16-mixed"


@pytest.mark.timeout(60)
def test_importing_the_registration_module_imports_neither_torch_nor_deepspeed() -> None:
    code = (
        "import sys, fabric_core_deepspeed, fabric_core_deepspeed._plugin; "
        "heavy = sorted(m for m in ('torch', 'deepspeed') if m in sys.modules); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_building_the_strategy_does_not_import_deepspeed() -> None:
    code = (
        "import sys; from fabric_core._kernel.selection import select; from fabric_core.testing import make_manager; "
        "from fabric_core._fabric.assembly import build; from fabric_core_deepspeed import _plugin; "
        "s = build(select(make_manager(('deepspeed', _plugin)), accelerator='cpu', devices=2, strategy='deepspeed')); "
        "sys.exit(1 if 'deepspeed' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(_plugin.STRATEGIES))
def test_every_name_builds_a_connected_deepspeed_strategy(name: str) -> None:
    built = build(choose(strategy=name))
    strategy = built.strategy
    assert type(strategy) is DeepSpeedStrategy
    assert strategy.requires_joint_setup is True
    assert strategy.world_size == 2 and strategy.num_processes == 2
    assert strategy.backward_sync_control is None
    assert type(strategy.launcher).__name__ == "SubprocessScriptLauncher"
    assert isinstance(built.precision, DeepSpeedPrecision) and built.precision.precision == "32-true"


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-true", "bf16-true", 32, "32"])
def test_precision_strings_select_deepspeeds_precision(precision: Any) -> None:
    selection = choose(strategy="deepspeed_stage_2", precision=precision)
    expected = "32-true" if str(precision) == "32" else precision
    decision = next(d for d in selection.decisions if d.step == "precision")
    assert decision.value == f"deepspeed-{expected}"
    assert decision.hook == "deepspeed.fabric_core_select_precision"
    built = build(selection).precision
    assert isinstance(built, DeepSpeedPrecision) and built.precision == expected


def test_16_mixed_on_cpu_becomes_bf16_mixed_with_a_warning() -> None:
    with pytest.warns(FabricCoreWarning, match="bf16-mixed"):
        selection = choose(strategy="deepspeed", precision="16-mixed")
    assert build(selection).precision.precision == "bf16-mixed"


def test_a_strategy_instance_also_gets_deepspeeds_precision() -> None:
    selection = choose(strategy=DeepSpeedStrategy(stage=3), precision="bf16-mixed")
    strategy = build(selection).strategy
    assert strategy.precision.precision == "bf16-mixed"
    assert strategy._format_config()["bf16"] == {"enabled": True}


def test_other_strategies_keep_the_core_precisions() -> None:
    selection = select(make_manager(("deepspeed", _plugin)), accelerator="cpu", devices=1, precision="bf16-mixed")
    assert type(build(selection).precision).__name__ == "MixedPrecision"


@pytest.mark.parametrize("precision", ["64-true", 64, "64"])
def test_double_precision_is_rejected(precision: Any) -> None:
    with pytest.raises(InvalidConfigError, match=r"strategy='deepspeed_stage_3', precision='64-true'.*Valid choices"):
        choose(strategy="deepspeed_stage_3", precision=precision)


def test_a_foreign_precision_instance_is_rejected() -> None:
    with pytest.raises(InvalidConfigError, match=r"precision='64-true'"):
        choose(strategy="deepspeed", plugins=[DoublePrecision()])
    with pytest.raises(InvalidConfigError, match=r"needs a `DeepSpeedPrecision`, got `Precision`"):
        from fabric_core.precision.precision import Precision

        build(choose(strategy=DeepSpeedStrategy(precision=Precision())))


def test_options_through_spec_reach_the_strategy() -> None:
    strategy = build(choose(strategy=spec("deepspeed_stage_3_offload", pin_memory=True, start_method="spawn"))).strategy
    assert strategy.zero_stage == 3
    assert strategy.config["zero_optimization"]["offload_param"]["pin_memory"] is True
    assert type(strategy.launcher).__name__ == "MultiProcessingLauncher"


def test_a_typo_suggests_the_right_name() -> None:
    with pytest.raises(UnknownNameError, match=r"Did you mean 'deepspeed_stage_2'"):
        choose(strategy="deepspeed_stage2")


def test_the_strategy_pickles_without_its_engines() -> None:
    import pickle

    # Spawned workers receive a pickled copy of the strategy.
    strategy = build(choose(strategy=spec("deepspeed", start_method="spawn"))).strategy
    strategy._engines.append(torch.nn.Linear(1, 1))
    copy = pickle.loads(pickle.dumps(strategy))
    assert copy._engines == [] and copy.config == strategy.config
