"""``fabric_core._kernel.arguments``: the raw ``Fabric(...)`` arguments checked and normalised before selection.

Every function here is called directly, without a manager or a plugin; ``tests/fabric/test_bad_arguments.py``
checks the same refusals through ``Fabric(...)`` itself, and ``tests/kernel/test_selection.py`` the overrides.
"""

from __future__ import annotations

from typing import Any

import pytest

from fabric_core import spec
from fabric_core._kernel.arguments import (
    DEFAULTS,
    ENV_OVERRIDES,
    LIGHTNING_ENV_OVERRIDES,
    check_logger,
    check_one_precision,
    check_type,
    from_environment,
    merge,
    name_and_options,
    normalize_devices,
    normalize_precision,
    validate_num_nodes,
)
from fabric_core.accelerators import CPUAccelerator
from fabric_core.errors import ArgumentTypeError, FabricCoreWarning, InvalidConfigError
from fabric_core.loggers import CSVLogger


def args(**given: Any) -> dict[str, Any]:
    return {**DEFAULTS, **given}


def test_the_command_lines_variables_replace_the_codes_defaults() -> None:
    assert LIGHTNING_ENV_OVERRIDES["num_nodes"] == "LT_NUM_NODES"
    environ = {ENV_OVERRIDES["devices"]: "2", ENV_OVERRIDES["precision"]: "bf16-mixed"}
    merged = from_environment(args(), environ)
    assert (merged["devices"], merged["precision"], merged["strategy"]) == ("2", "bf16-mixed", "auto")
    # the same value spelled another way is no contradiction
    assert from_environment(args(accelerator="CPU"), {"FABRIC_CORE_ACCELERATOR": "cpu"})["accelerator"] == "cpu"
    assert from_environment(args(), {}) == args()


def test_fabric_core_run_refuses_code_that_contradicts_it() -> None:
    with pytest.raises(InvalidConfigError, match=r"`Fabric\(strategy='ddp', \.\.\.\)`.*`--strategy=fsdp`") as caught:
        from_environment(args(strategy="ddp"), {"FABRIC_CORE_STRATEGY": "fsdp"})
    assert (caught.value.argument, caught.value.value) == ("strategy", "ddp")
    with pytest.raises(InvalidConfigError, match="--num-nodes=2"):
        from_environment(args(num_nodes=3), {"FABRIC_CORE_NUM_NODES": "2"})


def test_lightnings_variables_win_unless_its_cli_started_the_processes() -> None:
    # as Lightning's connector: LT_* replaces the code's argument ...
    assert from_environment(args(devices=4), {"LT_DEVICES": "2"})["devices"] == "2"
    # ... and contradicting it is an error only while LT_CLI_USED=1, spelled as Lightning spells the option
    with pytest.raises(InvalidConfigError, match="`--devices=2`"):
        from_environment(args(devices=4), {"LT_DEVICES": "2", "LT_CLI_USED": "1"})
    # fabric-core's own variable comes first
    both = {"FABRIC_CORE_DEVICES": "3", "LT_DEVICES": "2", "LT_CLI_USED": "1"}
    assert from_environment(args(), both)["devices"] == "3"


def test_names_and_specs_come_out_as_a_lower_case_name_and_options() -> None:
    assert name_and_options("  DDP ") == ("ddp", {})
    assert name_and_options(spec("DDP", find_unused_parameters=True)) == ("ddp", {"find_unused_parameters": True})
    # a hook's answer merged with the options the user gave: the user's win
    assert merge(spec("ddp", a=1, b=2), {"b": 3}) == ("ddp", {"a": 1, "b": 3})


def test_a_component_argument_is_a_name_a_spec_or_an_instance_of_its_kind() -> None:
    check_type("accelerator", "cpu", "an Accelerator")
    check_type("accelerator", spec("cpu"), "an Accelerator")
    check_type("accelerator", CPUAccelerator(), "an Accelerator")
    the_class = r"You selected an invalid accelerator name.*an Accelerator instance, not ABCMeta"
    with pytest.raises(InvalidConfigError, match=the_class):
        check_type("accelerator", CPUAccelerator, "an Accelerator")  # the class, not an instance
    with pytest.raises(InvalidConfigError, match=r"`Fabric\(checkpoint_io=3\)` must be a name") as caught:
        check_type("checkpoint_io", 3, "a CheckpointIO")
    assert "You selected" not in str(caught.value)  # Lightning's phrase is for accelerator and strategy only
    with pytest.raises(InvalidConfigError, match="invalid strategy name"):
        check_type("strategy", CPUAccelerator(), "a Strategy")  # an instance of another kind


@pytest.mark.parametrize(("given", "expected"), [(2, 2), ("3", 3), (" 4 ", 4), ("-1", -1), ("AUTO", "auto")])
def test_devices_are_normalised(given: Any, expected: Any) -> None:
    assert normalize_devices(given, "cpu") == expected


@pytest.mark.parametrize("given", [0, "0", [], (), True])
def test_no_device_is_refused_naming_the_accelerator(given: Any) -> None:
    with pytest.raises(InvalidConfigError, match="not a valid input using CPUAccelerator accelerator"):
        normalize_devices(given, CPUAccelerator())


def test_num_nodes_is_a_positive_integer() -> None:
    assert validate_num_nodes(2) == 2 and validate_num_nodes(" 3 ") == 3
    for bad in (0, -1, True, "two", 1.5):
        with pytest.raises(InvalidConfigError, match="`num_nodes` must be a positive integer"):
            validate_num_nodes(bad)


def test_precision_spellings_become_one_canonical_name() -> None:
    assert normalize_precision(None) == "32-true"
    assert normalize_precision(64) == "64-true" and normalize_precision("32") == "32-true"
    assert normalize_precision(" BF16-Mixed ") == "bf16-mixed"
    with pytest.warns(FabricCoreWarning, match="Please set your precision to 16-mixed instead"):
        assert normalize_precision(16) == "16-mixed"
    with pytest.warns(FabricCoreWarning, match="bf16-mixed instead"):
        assert normalize_precision("bf16") == "bf16-mixed"
    with pytest.raises(InvalidConfigError, match=r"Precision 1\.5 is invalid"):
        normalize_precision(1.5)


def test_a_precision_given_twice_is_refused_in_lightnings_words() -> None:
    check_one_precision(None, "bf16-mixed")
    check_one_precision("bf16-mixed", None)
    with pytest.raises(InvalidConfigError, match=r"Received both `precision=16-mixed` and `plugins='bf16-mixed'`"):
        check_one_precision("16", "bf16-mixed")


def test_a_logger_is_anything_with_log_metrics(tmp_path: Any) -> None:
    check_logger(CSVLogger(tmp_path), [], ["csv"])

    class LightningStyle:
        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    check_logger(LightningStyle(), [], ["csv"])
    with pytest.raises(ArgumentTypeError, match=r"'nope' \(str\) is not a logger\. Pass a name \('csv', 'tb'\)"):
        check_logger("nope", ["nope"], ["csv", "tb"])
