"""Selection of Fabric(...) arguments: the resolution flow, the hooks, env overrides and bad values."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from fabric_core import spec
from fabric_core._fabric.assembly import build
from fabric_core._kernel.manager import plugin_module
from fabric_core._kernel.selection import select
from fabric_core.errors import (
    AcceleratorUnavailableError,
    ArgumentTypeError,
    FabricCoreWarning,
    InvalidConfigError,
    UnknownNameError,
)
from fabric_core.testing import make_manager


def choose(**kwargs: Any) -> Any:
    return select(make_manager(), **kwargs)


def test_defaults_resolve_to_one_cpu_device_and_fp32() -> None:
    selection = choose()
    ctx = selection.context
    assert (ctx.accelerator, ctx.strategy, ctx.precision, ctx.environment) == (
        "cpu",
        "single_device",
        "32-true",
        "lightning",
    )
    assert ctx.parallel_devices == (torch.device("cpu"),)
    built = build(selection)
    assert type(built.strategy).__name__ == "SingleDeviceStrategy"
    assert built.strategy.root_device == torch.device("cpu")
    assert built.strategy.precision is built.precision
    assert [d.step for d in selection.decisions] == ["accelerator", "environment", "devices", "strategy", "precision"]


@pytest.mark.parametrize(
    ("precision", "expected", "warns"),
    [
        (None, "32-true", False),
        (32, "32-true", False),
        ("32", "32-true", False),
        (64, "64-true", False),
        ("64", "64-true", False),
        ("bf16", "bf16-mixed", True),
        ("BF16-Mixed", "bf16-mixed", False),
        ("16-true", "16-true", False),
        ("bf16-true", "bf16-true", False),
    ],
)
def test_precision_strings_and_aliases(precision: Any, expected: str, warns: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        selection = choose(precision=precision)
    assert selection.context.precision == expected
    assert selection.precision.entry is not None and selection.precision.entry.name == expected
    assert any("historical reasons" in str(w.message) for w in caught) == warns


def test_16_mixed_on_cpu_becomes_bf16_mixed_with_a_warning() -> None:
    with pytest.warns(FabricCoreWarning, match="bf16-mixed"):
        selection = choose(precision="16-mixed")
    assert selection.precision.entry is not None and selection.precision.entry.name == "bf16-mixed"
    assert build(selection).precision.__class__.__name__ == "MixedPrecision"


def test_mixed_precision_receives_the_device_type() -> None:
    selection = choose(precision="bf16-mixed")
    assert selection.precision.options["device"] == "cpu"


def test_env_overrides_replace_defaults_and_conflicts_are_errors() -> None:
    env = {"FABRIC_CORE_PRECISION": "bf16-true", "FABRIC_CORE_DEVICES": "1"}
    assert select(make_manager(), environ=env).context.precision == "bf16-true"
    assert select(make_manager(), precision="bf16-true", environ=env).context.precision == "bf16-true"
    with pytest.raises(InvalidConfigError, match=r"Fabric\(precision='64-true'.*--precision=bf16-true"):
        select(make_manager(), precision="64-true", environ=env)


def test_selection_hooks_decide_and_are_recorded() -> None:
    def pick_strategy(requested: str, context: Any) -> Any:
        return spec("single_device", device="cpu") if requested == "mine" else None

    def reject(context: Any) -> None:
        if context.precision == "64-true":
            raise InvalidConfigError("no doubles here", argument="precision")

    m = make_manager(
        plugin_module(
            "mine",
            {
                "fabric_core_select_strategy": pick_strategy,
                "fabric_core_validate_selection": reject,
            },
        )
    )
    selection = select(m, strategy="mine")
    assert selection.strategy.options == {"device": "cpu"}
    decision = next(d for d in selection.decisions if d.step == "strategy")
    assert decision.hook == "mine.fabric_core_select_strategy"
    with pytest.raises(InvalidConfigError, match="no doubles"):
        select(m, precision=64)


def test_auto_accelerator_prefers_higher_priority_and_rejects_ties() -> None:
    def register(registry: Any) -> None:
        registry.add(
            "fast",
            "fabric_core.accelerators.cpu:CPUAccelerator",
            description="x",
            priority=50,
            probe="fabric_core.accelerators.cpu:CPUAccelerator.is_available",
        )

    def register_twin(registry: Any) -> None:
        registry.add(
            "twin",
            "fabric_core.accelerators.cpu:CPUAccelerator",
            description="y",
            priority=50,
            probe="fabric_core.accelerators.cpu:CPUAccelerator.is_available",
        )

    one = make_manager(plugin_module("fast", {"fabric_core_register_accelerators": register}))
    assert select(one).context.accelerator == "fast"
    two = make_manager(
        plugin_module("fast", {"fabric_core_register_accelerators": register}),
        plugin_module("twin", {"fabric_core_register_accelerators": register_twin}),
    )
    with pytest.raises(InvalidConfigError, match=r"priority 50: fast, twin"):
        select(two)


def test_unavailable_accelerator_names_what_is_available() -> None:
    def register(registry: Any) -> None:
        registry.add(
            "ghost", "fabric_core.accelerators.cpu:CPUAccelerator", description="never here", probe="builtins:bool"
        )

    m = make_manager(plugin_module("ghost", {"fabric_core_register_accelerators": register}))
    # A RuntimeError too, as Lightning raises there.
    with pytest.raises(AcceleratorUnavailableError, match=r"`CPUAccelerator` can not run.*\['cpu'\]") as info:
        select(m, accelerator="ghost")
    assert isinstance(info.value, RuntimeError)


def test_named_loggers_and_instances() -> None:
    selection = choose(loggers=[spec("csv", root_dir="/tmp/x")])
    assert selection.loggers[0].options == {"root_dir": "/tmp/x"}
    marker = object()
    assert choose(callbacks=marker).callbacks[0].instance is marker


def test_plugins_argument_accepts_environment_names_and_instances() -> None:
    from fabric_core.precision.double import DoublePrecision

    selection = choose(plugins=["kubeflow", DoublePrecision()])
    assert selection.context.environment == "kubeflow"
    assert selection.context.precision == "64-true"


# ArgumentTypeError (a TypeError too) where Lightning raises TypeError.
BAD_VALUES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"accelerator": "cdua"}, UnknownNameError, r"accelerator 'cdua'.*Did you mean 'cuda'.*fabric-core-cuda"),
    ({"accelerator": "gpu"}, UnknownNameError, r"fabric-core-cuda"),
    ({"accelerator": "tpu"}, UnknownNameError, r"fabric-core-xla"),
    ({"accelerator": "mps"}, UnknownNameError, r"fabric-core-mps"),
    ({"accelerator": "quantum"}, UnknownNameError, r"'quantum'.*Valid choices: cpu"),
    ({"accelerator": 3}, InvalidConfigError, r"accelerator=3.*must be a name"),
    ({"accelerator": None}, InvalidConfigError, r"accelerator=None"),
    ({"strategy": "dpp"}, UnknownNameError, r"'dpp'.*Did you mean.*'ddp'"),
    ({"strategy": "ddp"}, UnknownNameError, r"pip install fabric-core-ddp"),
    ({"strategy": "fsdp"}, UnknownNameError, r"pip install fabric-core-fsdp"),
    ({"strategy": "deepspeed_stage_2"}, UnknownNameError, r"pip install fabric-core-deepspeed"),
    ({"strategy": "singledevice"}, UnknownNameError, r"Did you mean 'single_device'"),
    ({"strategy": 1.5}, InvalidConfigError, r"strategy=1.5"),
    ({"strategy": "x:single_device"}, UnknownNameError, r"'x:single_device'"),
    ({"devices": 0}, InvalidConfigError, r"devices=0.*not a valid input"),
    ({"devices": "0"}, InvalidConfigError, r"devices='0'.*not a valid input using auto accelerator"),
    ({"devices": []}, InvalidConfigError, r"devices=\[\].*not a valid input"),
    ({"devices": -1}, ArgumentTypeError, r"devices=-1.*should be an int > 0"),
    ({"devices": "-1"}, ArgumentTypeError, r"devices=-1.*should be an int > 0"),
    ({"devices": [0, 1]}, ArgumentTypeError, r"devices=\[0, 1\].*should be an int > 0"),
    ({"devices": "0,1"}, ArgumentTypeError, r"devices='0,1'.*should be an int > 0"),
    ({"devices": 2.5}, ArgumentTypeError, r"devices=2.5.*should be an int > 0"),
    ({"devices": True}, InvalidConfigError, r"devices=True"),
    ({"devices": 2}, InvalidConfigError, r"No installed plugin provides a strategy for 2 processes"),
    ({"num_nodes": 0}, InvalidConfigError, r"num_nodes=0.*positive integer"),
    ({"num_nodes": -3}, InvalidConfigError, r"num_nodes=-3"),
    ({"num_nodes": "two"}, InvalidConfigError, r"num_nodes='two'"),
    ({"num_nodes": 1.0}, InvalidConfigError, r"num_nodes=1.0"),
    ({"precision": "bf17-mixed"}, UnknownNameError, r"'bf17-mixed'.*Did you mean 'bf16-mixed'"),
    ({"precision": "8-true"}, UnknownNameError, r"precision '8-true'"),
    ({"precision": 8}, UnknownNameError, r"precision '8'"),
    ({"precision": "nf4"}, UnknownNameError, r"pip install fabric-core-bitsandbytes"),
    ({"precision": 16.0}, InvalidConfigError, r"Precision 16.0 is invalid"),
    ({"plugins": 42}, ArgumentTypeError, r"invalid type for plugin 42.*Precision, CheckpointIO"),
    ({"plugins": ["slurmm"]}, UnknownNameError, r"precision or cluster environment 'slurmm'.*Did you mean 'slurm'"),
    ({"plugins": ["slurm", "lsf"]}, InvalidConfigError, r"multiple values for ClusterEnvironment.*'slurm', 'lsf'"),
    ({"plugins": ["64-true"], "precision": "32-true"}, InvalidConfigError, r"Received both"),
    ({"loggers": "tensorbaord"}, UnknownNameError, r"Did you mean 'tensorboard'"),
    ({"loggers": ["csv", None]}, InvalidConfigError, r"contains None"),
    ({"callbacks": "throughputt"}, UnknownNameError, r"callback 'throughputt'.*Did you mean 'throughput'"),
]


@pytest.mark.parametrize(("kwargs", "error", "pattern"), BAD_VALUES, ids=[str(k) for k, _, _ in BAD_VALUES])
def test_bad_values_are_rejected_with_a_helpful_message(
    kwargs: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        choose(**kwargs)


def test_bad_values_table_is_large_enough() -> None:
    assert len(BAD_VALUES) >= 30
    assert {k for kwargs, _, _ in BAD_VALUES for k in kwargs} >= {
        "accelerator",
        "strategy",
        "devices",
        "num_nodes",
        "precision",
        "plugins",
        "loggers",
    }
