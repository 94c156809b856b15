"""The installed distribution, its registrations, and how selection picks FSDP's strategies and precision."""

from __future__ import annotations

import subprocess
import sys
import warnings
from importlib import metadata
from typing import Any

import pytest
import torch

from fabric_core import spec
from fabric_core._fabric.assembly import build
from fabric_core._kernel.registry import Registry
from fabric_core._kernel.selection import select
from fabric_core.errors import FabricCoreWarning, InvalidConfigError
from fabric_core.testing import make_manager
from fabric_core_fsdp import FSDPPrecision, FSDPStrategy, ModelParallelStrategy, _plugin


def choose(**kwargs: Any) -> Any:
    return select(make_manager(("fsdp", _plugin)), accelerator="cpu", **kwargs)


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "fsdp"]
    assert ep.value == "fabric_core_fsdp._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-fsdp"
    assert ep.load() is _plugin
    assert "fabric-core<0.2,>=0.1" in (metadata.requires("fabric-core-fsdp") or [])


@pytest.mark.timeout(60)
def test_importing_the_package_and_registration_module_does_not_import_torch() -> None:
    code = "import sys, fabric_core_fsdp, fabric_core_fsdp._plugin; sys.exit(1 if 'torch' in sys.modules else 0)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_registration_adds_the_strategies_with_their_defaults() -> None:
    registry = Registry("strategy", "fsdp")
    _plugin.fabric_core_register_strategies(registry=registry)
    entries = {e.name: e for e in registry.entries}
    assert sorted(entries) == ["fsdp", "fsdp1", "fsdp1_cpu_offload", "fsdp_cpu_offload", "model_parallel"]
    assert entries["fsdp1"].target == "fabric_core_fsdp.fsdp1:FSDP1Strategy"
    assert dict(entries["fsdp1_cpu_offload"].defaults) == {"start_method": "popen", "cpu_offload": True}
    assert dict(entries["fsdp_cpu_offload"].defaults) == {"start_method": "popen", "cpu_offload": True}
    assert entries["fsdp"].target == "fabric_core_fsdp.fsdp:FSDPStrategy"
    assert entries["model_parallel"].target == "fabric_core_fsdp.model_parallel:ModelParallelStrategy"
    assert all(e.requires == ("torch>=2.6",) and not e.missing_requirements() for e in entries.values())


def test_registration_adds_one_fsdp_precision_entry_per_precision() -> None:
    registry = Registry("precision", "fsdp")
    _plugin.fabric_core_register_precisions(registry=registry)
    names = [e.name for e in registry.entries]
    assert names == ["fsdp-32-true", "fsdp-bf16-mixed", "fsdp-16-mixed", "fsdp-bf16-true", "fsdp-16-true"]
    built = registry.entries[1].build({"device": "cpu"})
    assert isinstance(built, FSDPPrecision) and built.precision == "bf16-mixed"


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true", "16-true"])
def test_fsdp_gets_the_fsdp_precision(precision: str) -> None:
    selection = choose(devices=2, strategy="fsdp", precision=precision)
    assert selection.precision.entry.name == f"fsdp-{precision}"
    built = build(selection)
    assert isinstance(built.strategy, FSDPStrategy)
    assert isinstance(built.precision, FSDPPrecision) and built.precision.precision == precision
    assert built.precision.device == "cpu"


def test_16_mixed_on_cpu_becomes_bf16_mixed_with_a_warning() -> None:
    with pytest.warns(FabricCoreWarning, match="bf16-mixed"):
        selection = choose(devices=2, strategy="fsdp", precision="16-mixed")
    assert selection.precision.entry.name == "fsdp-bf16-mixed"


def test_other_strategies_keep_the_core_precisions() -> None:
    selection = choose(devices=1, precision="bf16-mixed")
    assert selection.precision.entry.name == "bf16-mixed"
    assert selection.precision.entry.plugin == "builtin"


def test_the_selected_strategy_gets_the_policy_of_its_precision() -> None:
    built = build(choose(devices=2, strategy="fsdp", precision="bf16-mixed"))
    policy = built.strategy.mixed_precision_policy
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)


def test_strategy_options_come_through_spec() -> None:
    built = build(choose(devices=2, strategy=spec("fsdp", sharding_strategy="SHARD_GRAD_OP")))
    assert built.strategy.reshard_after_forward is False
    assert built.strategy.start_method == "popen"
    assert type(built.strategy.launcher).__name__ == "SubprocessScriptLauncher"


def test_spawn_start_method_uses_the_multiprocessing_launcher() -> None:
    built = build(choose(devices=2, strategy=spec("fsdp", start_method="spawn")))
    assert type(built.strategy.launcher).__name__ == "MultiProcessingLauncher"


def test_cpu_offload_on_the_cpu_accelerator_explains_why_it_cannot_run() -> None:
    selection = choose(devices=2, strategy="fsdp_cpu_offload")
    with pytest.raises(InvalidConfigError, match="Cannot access accelerator device when none is available"):
        build(selection)


def test_model_parallel_is_selected_by_name_with_its_function() -> None:
    def parallelize(model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
        return model

    built = build(choose(devices=2, strategy=spec("model_parallel", parallelize_fn=parallelize)))
    assert isinstance(built.strategy, ModelParallelStrategy)
    assert type(built.precision).__name__ == "Precision"  # the core's: parallelize_fn owns FSDP's policy


@pytest.mark.parametrize("precision", ["16-mixed", "64-true"])
def test_model_parallel_rejects_precisions_it_cannot_run(precision: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FabricCoreWarning)
        with pytest.raises(InvalidConfigError, match="model-parallel strategy supports the precisions"):
            choose(devices=2, strategy=spec("model_parallel", parallelize_fn=print), precision=precision)


def test_model_parallel_without_a_function_says_how_to_pass_one() -> None:
    selection = choose(devices=2, strategy="model_parallel")
    with pytest.raises(InvalidConfigError, match=r"spec\('model_parallel', parallelize_fn=parallelize\)"):
        build(selection)


def test_a_plugin_manager_discovers_it() -> None:
    from fabric_core import PluginManager

    manager = PluginManager(allow=["fsdp"], strict=True, environ={})
    (record,) = [r for r in manager.records if r.name == "fsdp"]
    assert (record.status, record.distribution) == ("loaded", "fabric-core-fsdp")
    assert manager.catalog.get("strategy", "fsdp").plugin == "fsdp"
    assert manager.catalog.get("precision", "fsdp-bf16-mixed").plugin == "fsdp"
