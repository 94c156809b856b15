"""FSDPStrategy's options and the checks it makes before any process group exists."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
from torch import nn

from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import Precision
from fabric_core.testing import connect_to_cpus
from fabric_core_fsdp import FSDPPrecision, FSDPStrategy


def connected(precision: Any = None, **options: Any) -> FSDPStrategy:
    return connect_to_cpus(FSDPStrategy(**options), precision=precision)


@pytest.mark.parametrize(
    ("sharding_strategy", "reshard"),
    [("FULL_SHARD", True), ("shard_grad_op", False), ("HYBRID_SHARD", True), ("_HYBRID_SHARD_ZERO2", False)],
)
def test_sharding_strategy_names_set_resharding(sharding_strategy: str, reshard: bool) -> None:
    assert FSDPStrategy(sharding_strategy=sharding_strategy).reshard_after_forward is reshard


def test_torch_sharding_strategy_enum_is_accepted() -> None:
    from torch.distributed.fsdp import ShardingStrategy

    assert FSDPStrategy(sharding_strategy=ShardingStrategy.SHARD_GRAD_OP).reshard_after_forward is False


def test_reshard_after_forward_defaults_to_full_sharding() -> None:
    assert FSDPStrategy().reshard_after_forward is True
    assert FSDPStrategy(reshard_after_forward=False).reshard_after_forward is False


def test_unknown_sharding_strategy_lists_the_choices() -> None:
    with pytest.raises(InvalidConfigError, match="'FULL_SHARD', 'SHARD_GRAD_OP', 'NO_SHARD', 'HYBRID_SHARD'"):
        FSDPStrategy(sharding_strategy="NO_SUCH")
    with pytest.raises(KeyError, match="NO_SUCH"):  # as Lightning's `ShardingStrategy["NO_SUCH"]`
        FSDPStrategy(sharding_strategy="NO_SUCH")


def test_contradicting_resharding_options_are_an_error() -> None:
    with pytest.raises(InvalidConfigError, match="contradict"):
        FSDPStrategy(sharding_strategy="FULL_SHARD", reshard_after_forward=False)


@pytest.mark.parametrize("mesh", [(0, 2), (1, 2, 3), ("a",)])
def test_bad_device_mesh_tuples_are_rejected(mesh: Any) -> None:
    with pytest.raises(InvalidConfigError, match="device_mesh"):
        FSDPStrategy(device_mesh=mesh)


@pytest.mark.parametrize("policy", [{int}, 5, "Linear"])
def test_bad_policies_are_rejected(policy: Any) -> None:
    with pytest.raises(InvalidConfigError, match="auto_wrap_policy"):
        FSDPStrategy(auto_wrap_policy=policy)


@pytest.mark.parametrize(("argument", "value"), [("start_method", "thread"), ("state_dict_type", "local")])
def test_unknown_choices_name_the_valid_ones(argument: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=rf"{argument}={value!r}.*Valid choices"):
        options: dict[str, Any] = {argument: value}
        FSDPStrategy(**options)


def test_arguments_the_strategy_sets_itself_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match="mixed_precision="):
        FSDPStrategy(mp_policy=None)


def test_the_strategy_pickles_with_its_policies_for_spawn() -> None:
    strategy = connected(
        start_method="spawn", auto_wrap_policy={nn.Linear}, activation_checkpointing_policy=[nn.Linear]
    )
    copy = pickle.loads(pickle.dumps(strategy))
    assert copy.reshard_after_forward is True
    assert copy._wrap_policy(nn.Linear(1, 1)) and not copy._wrap_policy(nn.ReLU())


def test_a_callable_policy_is_used_as_given() -> None:
    def policy(module: nn.Module) -> bool:
        return isinstance(module, nn.Linear)

    assert FSDPStrategy(auto_wrap_policy=policy)._wrap_policy is policy


def test_a_given_mixed_precision_policy_wins_over_the_precision_plugin() -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mine = MixedPrecisionPolicy(param_dtype=torch.float16)
    assert connected(FSDPPrecision("bf16-mixed", device="cpu"), mixed_precision=mine).mixed_precision_policy is mine
    policy = connected(FSDPPrecision("bf16-mixed", device="cpu")).mixed_precision_policy
    assert policy is not None and policy.param_dtype == torch.bfloat16
    assert connected(Precision()).mixed_precision_policy is None


def test_cpu_offload_is_refused_on_the_cpu_accelerator() -> None:
    with pytest.raises(InvalidConfigError, match="pins host memory"):
        connected(cpu_offload=True)


def test_an_optimizer_over_plain_parameters_is_refused() -> None:
    optimizer = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(InvalidConfigError, match="create the optimizer after setting up the model"):
        connected().setup_optimizer(optimizer)


def test_empty_init_creates_modules_on_the_meta_device() -> None:
    strategy = connected()
    with strategy.module_init_context(empty_init=True):
        module = nn.Linear(1000, 1000)
    assert module.weight.is_meta
    with strategy.module_init_context(empty_init=False):
        module = nn.Linear(2, 2)
    assert module.weight.device == torch.device("cpu")


def test_empty_init_keeps_the_true_half_dtype() -> None:
    strategy = connected(FSDPPrecision("bf16-true", device="cpu"))
    with strategy.module_init_context(empty_init=True):
        module = nn.Linear(4, 4)
    assert (module.weight.is_meta, module.weight.dtype) == (True, torch.bfloat16)


def test_filter_with_sharded_checkpoints_is_refused_before_any_collective(tmp_path: Any) -> None:
    with pytest.raises(InvalidConfigError, match="filter"):
        connected().save_checkpoint(tmp_path / "ckpt", {"model": nn.Linear(2, 2)}, filter={"model": lambda k, v: True})
    assert not (tmp_path / "ckpt").exists()


def test_storage_options_are_not_supported(tmp_path: Any) -> None:
    with pytest.raises(TypeError, match="storage_options"):
        connected().save_checkpoint(tmp_path / "ckpt", {}, storage_options={"x": 1})


def test_no_backward_sync_needs_an_fsdp_module() -> None:
    control = connected().backward_sync_control
    assert control is not None
    with pytest.raises(TypeError, match="fully_shard"):
        control.no_backward_sync(nn.Linear(2, 2), enabled=True)
    with control.no_backward_sync(nn.Linear(2, 2), enabled=False):
        pass


def test_the_device_mesh_exists_only_once_launched() -> None:
    with pytest.raises(RuntimeError, match="launch"):
        _ = connected().device_mesh


def test_wrap_order_is_children_first_siblings_in_order_each_module_once() -> None:
    from fabric_core_fsdp.fsdp import _post_order

    shared = nn.Linear(2, 2)
    inner = nn.Sequential(nn.Linear(1, 1), nn.ReLU())
    model = nn.Sequential(inner, shared, nn.Sequential(shared))
    order = list(_post_order(model))
    assert order == [inner[0], inner[1], inner, shared, model[2], model]
    assert {id(m) for m in order} == {id(m) for m in model.modules()} and len(order) == len(list(model.modules()))


def test_process_group_backend_is_none_until_the_group_exists_as_in_lightning() -> None:
    lightning_fsdp = pytest.importorskip("lightning_fabric.strategies.fsdp")
    assert FSDPStrategy().process_group_backend is None
    assert lightning_fsdp.FSDPStrategy().process_group_backend is None
    assert FSDPStrategy(process_group_backend="gloo").process_group_backend == "gloo"


def test_module_sharded_context_creates_an_ordinary_model_that_setup_shards() -> None:
    # Lightning's FSDP1 context only enables `wrap()`; FSDP2 shards in setup, so creation is unchanged.
    torch.manual_seed(0)
    expected = nn.Linear(3, 3).weight.detach().clone()
    torch.manual_seed(0)
    with connected().module_sharded_context():
        created = nn.Linear(3, 3)
    assert created.weight.device == torch.device("cpu")
    assert torch.equal(created.weight, expected)
