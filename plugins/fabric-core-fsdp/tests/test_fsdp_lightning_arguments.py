"""Lightning's FSDP1-style arguments, translated to FSDP2; the attributes compared with Lightning's own strategy.

Both strategies are only constructed here (no processes): what they report must agree.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    CPUOffloadPolicy,
    MixedPrecision,
    MixedPrecisionPolicy,
    ShardingStrategy,
)

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import Precision
from fabric_core.testing import connect_to_cpus
from fabric_core_fsdp import FSDPPrecision, FSDPStrategy

lightning_fsdp = pytest.importorskip("lightning_fabric.strategies.fsdp")
lightning_precision = pytest.importorskip("lightning_fabric.plugins.precision.fsdp")


def both(**options: Any) -> tuple[FSDPStrategy, Any]:
    return FSDPStrategy(**options), lightning_fsdp.FSDPStrategy(**options)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sharding_strategy": "FULL_SHARD"},
        {"sharding_strategy": "shard_grad_op"},
        {"sharding_strategy": "NO_SHARD"},
        {"sharding_strategy": ShardingStrategy.NO_SHARD},
        {"sharding_strategy": "HYBRID_SHARD", "device_mesh": (1, 2)},
        {"sharding_strategy": ShardingStrategy._HYBRID_SHARD_ZERO2, "device_mesh": (2, 1)},
    ],
)
def test_sharding_strategy_is_reported_as_lightning_does(options: dict[str, Any]) -> None:
    ours, theirs = both(**options)
    assert type(ours.sharding_strategy) is ShardingStrategy
    assert ours.sharding_strategy == theirs.sharding_strategy


@pytest.mark.parametrize(
    ("sharding_strategy", "reshard", "layout"),
    [("FULL_SHARD", True, "shard"), ("NO_SHARD", False, "replicate"), ("HYBRID_SHARD", True, "hybrid")],
)
def test_sharding_strategy_translates_to_fsdp2(sharding_strategy: str, reshard: bool, layout: str) -> None:
    strategy = FSDPStrategy(sharding_strategy=sharding_strategy)
    assert (strategy.reshard_after_forward, strategy._sharding.layout) == (reshard, layout)


def test_reshard_after_forward_alone_reports_the_matching_sharding_strategy() -> None:
    assert FSDPStrategy(reshard_after_forward=False).sharding_strategy == ShardingStrategy.SHARD_GRAD_OP


def test_no_shard_with_a_sharding_mesh_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"NO_SHARD.*HYBRID_SHARD"):
        FSDPStrategy(sharding_strategy="NO_SHARD", device_mesh=(1, 2))


def test_a_sharding_strategy_of_another_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"sharding_strategy=3.*Valid choices"):
        FSDPStrategy(sharding_strategy=3)


@pytest.mark.parametrize(
    ("cpu_offload", "policy"),
    [
        (None, None),
        (False, None),
        (True, CPUOffloadPolicy),
        (CPUOffload(), None),
        (CPUOffload(offload_params=True), CPUOffloadPolicy),
    ],
)
def test_cpu_offload_translates_and_is_reported_as_lightning_does(cpu_offload: Any, policy: Any) -> None:
    ours, theirs = both(cpu_offload=cpu_offload)
    assert type(ours.cpu_offload) is CPUOffload
    assert ours.cpu_offload == theirs.cpu_offload
    assert (None if ours._offload is None else type(ours._offload)) is policy


def test_an_fsdp2_offload_policy_is_reported_as_cpu_offload() -> None:
    assert FSDPStrategy(cpu_offload=CPUOffloadPolicy(pin_memory=False)).cpu_offload == CPUOffload(offload_params=True)


def test_cpu_offload_of_another_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="cpu_offload='yes'"):
        FSDPStrategy(cpu_offload="yes")


@pytest.mark.parametrize(
    "mixed_precision",
    [
        None,
        MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16),
        MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32),
    ],
)
def test_mixed_precision_config_is_reported_as_lightning_does(mixed_precision: Any) -> None:
    ours, theirs = both(mixed_precision=mixed_precision)
    config = connect_to_cpus(ours).mixed_precision_config
    assert type(config) is MixedPrecision
    assert config == theirs.mixed_precision_config
    assert ours.mixed_precision is mixed_precision


def test_fsdp1_mixed_precision_becomes_an_fsdp2_policy_and_a_buffer_dtype() -> None:
    strategy = FSDPStrategy(
        mixed_precision=MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16
        )
    )
    assert strategy.mixed_precision_policy == MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True
    )
    assert strategy._buffer_dtype == torch.bfloat16


def test_the_given_mixed_precision_wins_over_the_plugins() -> None:
    given = MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float16)
    strategy = connect_to_cpus(FSDPStrategy(mixed_precision=given), precision=FSDPPrecision("bf16-mixed", device="cpu"))
    policy = strategy.mixed_precision_policy
    assert policy is not None and (policy.param_dtype, policy.reduce_dtype) == (torch.float16, torch.float16)
    assert strategy.mixed_precision_config is given


@pytest.mark.parametrize("precision", ["32-true", "bf16-true", "16-true", "bf16-mixed", "16-mixed"])
def test_the_plugins_config_and_warning_are_lightnings(precision: str) -> None:
    # Lightning's FSDP1 config (what FSDP1Strategy wraps with), and its warning for the "true" half precisions.
    expect = pytest.warns(UserWarning, match="enables computation in lower precision")
    with expect if precision.endswith("16-true") else warnings.catch_warnings():
        if not precision.endswith("16-true"):
            warnings.simplefilter("error")
        ours = FSDPPrecision(precision, device="cpu").mixed_precision_config
    with pytest.warns(UserWarning) if precision.endswith("16-true") else contextlib.nullcontext():
        theirs = lightning_precision.FSDPPrecision(precision).mixed_precision_config
    assert ours == theirs


@pytest.mark.parametrize(("precision", "dtype"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_the_fsdp2_strategy_reports_the_float32_gradient_reduction_it_runs(precision: str, dtype: torch.dtype) -> None:
    # A deliberate difference: FSDP2 reduces gradients in float32 where Lightning's FSDP1 reduces in the half dtype.
    strategy = connect_to_cpus(FSDPStrategy(), precision=FSDPPrecision(precision, device="cpu"))
    assert strategy.mixed_precision_config == MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32)


def test_the_plain_32_true_plugin_reports_float32_everywhere_as_lightnings_default() -> None:
    assert connect_to_cpus(FSDPStrategy(), precision=Precision()).mixed_precision_config == MixedPrecision(
        param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32
    )


@pytest.mark.parametrize(
    ("mixed_precision", "match"),
    [
        (
            MixedPrecision(param_dtype=torch.bfloat16, keep_low_precision_grads=True),
            "keep_low_precision_grads.*bf16-true",
        ),
        (MixedPrecision(_module_classes_to_ignore=(nn.LayerNorm,)), "_module_classes_to_ignore.*fully_shard"),
    ],
)
def test_mixed_precision_fields_fsdp2_cannot_express_are_refused(mixed_precision: Any, match: str) -> None:
    with pytest.raises(InvalidConfigError, match=match):
        FSDPStrategy(mixed_precision=mixed_precision)


def test_mixed_precision_of_another_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"mixed_precision=torch\.bfloat16"):
        FSDPStrategy(mixed_precision=torch.bfloat16)


def test_fsdp1_performance_knobs_are_accepted_and_not_forwarded() -> None:
    options = {
        "backward_prefetch": BackwardPrefetch.BACKWARD_POST,
        "forward_prefetch": True,
        "limit_all_gathers": False,
        "use_orig_params": True,
    }
    lightning_fsdp.FSDPStrategy(**options)  # Lightning accepts them too
    assert FSDPStrategy(**options)._fully_shard_kwargs == {}


def test_sync_module_states_is_taken_by_the_strategy() -> None:
    strategy = FSDPStrategy(sync_module_states=True)
    assert strategy._sync_module_states is True
    assert "sync_module_states" not in strategy._fully_shard_kwargs


def test_ignored_modules_and_states_become_fully_shards_ignored_params() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    strategy = FSDPStrategy(ignored_modules=[model[0]], ignored_states=[model[1].bias])
    assert strategy._fully_shard_kwargs["ignored_params"] == {model[0].weight, model[0].bias, model[1].bias}


@pytest.mark.parametrize(
    ("option", "value", "error", "match"),
    [
        ("use_orig_params", False, ValueError, "use_orig_params=False.*never flattens"),
        ("param_init_fn", lambda m: None, ValueError, "param_init_fn.*empty_init=True"),
        ("process_group", object(), ValueError, "process_group.*device_mesh="),
        ("device_id", 0, TypeError, "device_id=0.*devices="),
        ("ignored_modules", [3], TypeError, "ignored_modules.*modules or parameters"),
    ],
)
def test_fsdp1_options_fsdp2_cannot_express_name_what_to_use(option: str, value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        FSDPStrategy(**{option: value})
    assert isinstance(info.value, InvalidConfigError)


def test_a_module_wrap_policy_is_read_as_its_module_classes() -> None:
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    predicate = FSDPStrategy(auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))._wrap_policy
    assert predicate is not None and predicate(nn.Linear(1, 1)) and not predicate(nn.ReLU())


def test_fsdp1_callable_policies_are_asked_as_fsdp1_asks_them() -> None:
    import functools

    from torch.distributed.fsdp.wrap import CustomPolicy, size_based_auto_wrap_policy, transformer_auto_wrap_policy

    big, small = nn.Linear(20, 20), nn.Linear(2, 2)
    by_size = FSDPStrategy(auto_wrap_policy=functools.partial(size_based_auto_wrap_policy, min_num_params=100))
    assert by_size._wrap_policy is not None and by_size._wrap_policy(big) and not by_size._wrap_policy(small)
    by_class = FSDPStrategy(
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
    )
    assert by_class._wrap_policy is not None and by_class._wrap_policy(small) and not by_class._wrap_policy(nn.ReLU())
    custom = FSDPStrategy(auto_wrap_policy=CustomPolicy(lambda m: isinstance(m, nn.Linear)))
    assert custom._wrap_policy is not None and custom._wrap_policy(small) and not custom._wrap_policy(nn.ReLU())


def test_a_custom_policy_asking_for_fsdp1_arguments_is_refused() -> None:
    from torch.distributed.fsdp.wrap import CustomPolicy

    strategy = FSDPStrategy(auto_wrap_policy=CustomPolicy(lambda m: {"sharding_strategy": "NO_SHARD"}))
    assert strategy._wrap_policy is not None
    with pytest.raises(InvalidConfigError, match=r"per-module FullyShardedDataParallel arguments.*fully_shard"):
        strategy._wrap_policy(nn.Linear(2, 2))


def test_deprecated_activation_checkpointing_becomes_the_policy() -> None:
    with pytest.warns(DeprecationWarning, match="activation_checkpointing_policy"):
        strategy = FSDPStrategy(activation_checkpointing=[nn.Linear])
    assert strategy._checkpointing_policy is not None and strategy._checkpointing_policy(nn.Linear(1, 1))
    with pytest.raises(ValueError, match="cannot set both"):
        FSDPStrategy(activation_checkpointing=nn.Linear, activation_checkpointing_policy={nn.Linear})
