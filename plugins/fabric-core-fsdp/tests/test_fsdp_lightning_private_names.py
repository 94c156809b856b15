"""Lightning's private names of ``strategies.fsdp``, ``strategies.model_parallel`` and ``plugins.precision.fsdp``,
called with the same inputs on both packages."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, get_args

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.fsdp import CPUOffload, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

import fabric_core.plugins.precision.fsdp as our_precision
import fabric_core.strategies.fsdp as ours
import fabric_core.strategies.model_parallel as our_mp

lightning = pytest.importorskip("lightning_fabric.strategies.fsdp")
import lightning_fabric.plugins.precision.fsdp as their_precision  # noqa: E402
import lightning_fabric.strategies.model_parallel as their_mp  # noqa: E402

BOTH = pytest.mark.parametrize("module", [lightning, ours], ids=["lightning", "fabric_core"])
BOTH_MP = pytest.mark.parametrize("module", [their_mp, our_mp], ids=["lightning", "fabric_core"])
FSDP_NAMES = [
    "_FSDP_ALIASES",
    "_activation_checkpointing_kwargs",
    "_auto_wrap_policy_kwargs",
    "_setup_activation_checkpointing",
    "_FSDPBackwardSyncControl",
    "_init_cpu_offload",
    "_init_sharding_strategy",
    "_optimizer_has_flat_params",
    "_get_sharded_state_dict_context",
    "_get_full_state_dict_context",
    "_is_sharded_checkpoint",
    "_is_full_checkpoint",
    "_has_fsdp_modules",
    "_move_torchmetrics_to_device",
    "_distributed_checkpoint_save",
    "_distributed_checkpoint_load",
]
MP_NAMES = [
    "TModel",
    "_ParallelBackwardSyncControl",
    "_FSDPNoSync",
    "_save_checkpoint",
    "_load_checkpoint",
    "_setup_device_mesh",
    "_has_dtensor_modules",
    "_load_raw_module_state_from_path",
    "_load_raw_module_state",
    "_named_parameters_and_buffers_to_load",
    "_rekey_optimizer_state_if_needed",
    "_distributed_checkpoint_save",
    "_distributed_checkpoint_load",
    "_get_full_state_dict_context",
    "_is_full_checkpoint",
    "_is_sharded_checkpoint",
]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(self.linear(x))


def model() -> nn.Module:
    return nn.Sequential(Block(), nn.ReLU(), Block(), nn.Linear(4, 2))


def test_every_name_is_importable_from_the_lightning_paths() -> None:
    from fabric_core.plugins.precision.fsdp import _PRECISION_INPUT
    from fabric_core.strategies.fsdp import _FSDPBackwardSyncControl, _init_sharding_strategy
    from fabric_core.strategies.model_parallel import _FSDPNoSync, _load_checkpoint, _setup_device_mesh

    assert [n for n in FSDP_NAMES if not hasattr(ours, n)] == []
    assert [n for n in MP_NAMES if not hasattr(our_mp, n)] == []
    assert callable(_init_sharding_strategy) and callable(_load_checkpoint) and callable(_setup_device_mesh)
    assert isinstance(_FSDPBackwardSyncControl(), ours._BackwardSyncControl)
    assert _FSDPNoSync(nn.Linear(1, 1), True) is not None
    assert set(get_args(_PRECISION_INPUT)) == {"32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"}
    # model_parallel's names taken from strategies.fsdp are the same objects there.
    assert our_mp._is_full_checkpoint is ours._is_full_checkpoint


def test_constants_match() -> None:
    assert ours._FSDP_ALIASES == lightning._FSDP_ALIASES
    assert get_args(our_precision._PRECISION_INPUT) == get_args(their_precision._PRECISION_INPUT)
    assert our_mp.TModel.__bound__ is their_mp.TModel.__bound__ is nn.Module


def test_auto_wrap_policy_kwargs() -> None:
    for module in (lightning, ours):
        kwargs: dict[str, Any] = {"x": 1}
        assert module._auto_wrap_policy_kwargs(None, kwargs) is kwargs and kwargs == {"x": 1}
        policy = module._auto_wrap_policy_kwargs({Block}, {})["auto_wrap_policy"]
        assert isinstance(policy, ModuleWrapPolicy) and set(policy._module_classes) == {Block}
        size_based = functools.partial(size_based_auto_wrap_policy, min_num_params=10)
        assert module._auto_wrap_policy_kwargs(size_based, {})["auto_wrap_policy"] is size_based


def _checkpointed(module: ModuleType, *args: Any) -> list[str]:
    net = model()
    module._setup_activation_checkpointing(net, module._activation_checkpointing_kwargs(*args))
    return [name for name, m in net.named_modules() if type(m).__name__ == "CheckpointWrapper"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("args", [(None, None), (Block, None), ([Block, nn.ReLU], None), (None, {Block})], ids=str)
def test_activation_checkpointing_kwargs_checkpoint_the_same_layers(args: tuple[Any, Any]) -> None:
    expected = _checkpointed(lightning, *args)
    assert _checkpointed(ours, *args) == expected
    assert (expected == []) is (args == (None, None))


@BOTH
def test_activation_checkpointing_refuses_both_arguments(module: ModuleType) -> None:
    with pytest.raises(ValueError, match="You cannot set both"):
        module._activation_checkpointing_kwargs(Block, {Block})


@BOTH
def test_setup_activation_checkpointing_skips_a_checkpointed_model(module: ModuleType) -> None:
    net = model()
    module._setup_activation_checkpointing(net, module._activation_checkpointing_kwargs(None, {Block}))
    with pytest.warns(UserWarning, match="already contains checkpointed layers"):
        module._setup_activation_checkpointing(net, module._activation_checkpointing_kwargs(None, {nn.ReLU}))
    assert sum(type(m).__name__ == "CheckpointWrapper" for m in net.modules()) == 2


@pytest.mark.parametrize("value", [None, False, True, CPUOffload(offload_params=True), CPUOffload()], ids=str)
def test_init_cpu_offload(value: Any) -> None:
    theirs, mine = lightning._init_cpu_offload(value), ours._init_cpu_offload(value)
    assert isinstance(mine, CPUOffload) and mine.offload_params == theirs.offload_params
    assert (mine is value) is (theirs is value)


@pytest.mark.parametrize(
    ("value", "kwargs"),
    [
        ("full_shard", {}),
        ("SHARD_GRAD_OP", {}),
        (ShardingStrategy.NO_SHARD, {}),
        ("hybrid_shard", {"auto_wrap_policy": {Block}}),
        ("_HYBRID_SHARD_ZERO2", {"device_mesh": (1, 1)}),
    ],
    ids=str,
)
def test_init_sharding_strategy(value: Any, kwargs: dict[str, Any]) -> None:
    assert ours._init_sharding_strategy(value, kwargs) is lightning._init_sharding_strategy(value, kwargs)


@BOTH
@pytest.mark.parametrize(
    ("value", "kwargs", "error", "phrase"),
    [
        ("HYBRID_SHARD", {}, RuntimeError, "requires you to pass at least one"),
        ("FULL_SHARD", {"process_group": object(), "device_mesh": (1, 1)}, ValueError, "mutually exclusive"),
        ("QUARTER_SHARD", {}, KeyError, "QUARTER_SHARD"),
    ],
)
def test_init_sharding_strategy_errors(
    module: ModuleType, value: str, kwargs: dict[str, Any], error: type[Exception], phrase: str
) -> None:
    with pytest.raises(error, match=phrase):
        module._init_sharding_strategy(value, kwargs)


def test_checkpoint_kinds_on_real_paths(tmp_path: Path) -> None:
    sharded = tmp_path / "sharded"
    dcp_save({"model": {"w": torch.ones(2)}}, checkpoint_id=sharded, no_dist=True)
    torch.save({"step": 1}, sharded / "meta.pt")
    full = tmp_path / "full.ckpt"
    torch.save({"model": {"w": torch.ones(2)}}, full)
    (tmp_path / "empty").mkdir()
    paths = [sharded, full, tmp_path / "empty", tmp_path / "missing"]
    for check in ("_is_sharded_checkpoint", "_is_full_checkpoint"):
        answers = [getattr(ours, check)(p) for p in paths]
        assert answers == [getattr(lightning, check)(p) for p in paths]
    assert [ours._is_sharded_checkpoint(p) for p in paths] == [True, False, False, False]


def test_distributed_checkpoint_save_and_load_read_each_other(tmp_path: Path) -> None:
    for writer, reader in ((lightning, ours), (ours, lightning)):
        path = tmp_path / writer.__name__
        writer._distributed_checkpoint_save({"model": {"w": torch.arange(4.0)}}, path)
        target = {"model": {"w": torch.zeros(4)}}
        reader._distributed_checkpoint_load(target, path)
        assert torch.equal(target["model"]["w"], torch.arange(4.0))


@BOTH
def test_has_fsdp_modules_and_flat_params_of_plain_objects(module: ModuleType) -> None:
    net = model()
    assert module._has_fsdp_modules(net) is False
    assert module._has_fsdp_modules("not a module") is False
    assert module._optimizer_has_flat_params(torch.optim.SGD(net.parameters(), lr=0.1)) is False


@BOTH
def test_move_torchmetrics_to_device_leaves_other_modules(module: ModuleType) -> None:
    net = model()
    before = [p.data_ptr() for p in net.parameters()]
    assert module._move_torchmetrics_to_device(net, torch.device("cpu")) is None
    assert [p.data_ptr() for p in net.parameters()] == before


class Buffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(2))
        self.register_buffer("kept", torch.zeros(2))
        self.register_buffer("dropped", torch.zeros(2), persistent=False)
        self.child = nn.Linear(2, 2)


def test_named_parameters_and_buffers_to_load() -> None:
    theirs = [n for n, _ in their_mp._named_parameters_and_buffers_to_load(Buffers())]
    assert [n for n, _ in our_mp._named_parameters_and_buffers_to_load(Buffers())] == theirs == ["kept", "weight"]


def test_rekey_optimizer_state_if_needed() -> None:
    net = model()
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()
    theirs = their_mp._rekey_optimizer_state_if_needed(state, net)
    mine = our_mp._rekey_optimizer_state_if_needed(state, net)
    assert list(mine["state"]) == list(theirs["state"]) == [n for n, _ in net.named_parameters()]
    # torch's rekeying sorts each group's names; which parameters a group holds is what counts.
    assert [sorted(g["params"]) for g in mine["param_groups"]] == [sorted(g["params"]) for g in theirs["param_groups"]]
    for name, entry in theirs["state"].items():
        assert torch.equal(mine["state"][name]["exp_avg"], entry["exp_avg"])
    assert our_mp._rekey_optimizer_state_if_needed(mine, net)["state"].keys() == mine["state"].keys()


@BOTH_MP
def test_load_raw_module_state_into_a_plain_module(module: ModuleType) -> None:
    source, target = model(), model()
    module._load_raw_module_state(source.state_dict(), target)
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))
    partial = {k: v for k, v in source.state_dict().items() if not k.startswith("3.")}
    with pytest.raises(RuntimeError, match="Missing key"):
        module._load_raw_module_state(partial, model())
    module._load_raw_module_state(partial, model(), strict=False)


@BOTH_MP
def test_load_raw_module_state_from_path_needs_a_file(module: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be a single file"):
        module._load_raw_module_state_from_path(tmp_path, model(), world_size=1)
    source, target = model(), model()
    torch.save(source.state_dict(), tmp_path / "w.pt")
    module._load_raw_module_state_from_path(tmp_path / "w.pt", target, world_size=1)
    assert torch.equal(target[3].weight, source[3].weight)


@BOTH_MP
def test_setup_device_mesh_refuses_sizes_not_matching_the_world(module: ModuleType) -> None:
    with pytest.raises(RuntimeError, match="multiplied should equal the world size"):
        module._setup_device_mesh(2, 3, 4, torch.device("cpu"))


@BOTH_MP
def test_save_checkpoint_needs_a_distributed_model(module: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Could not find a distributed model"):
        module._save_checkpoint(tmp_path / "c", {"model": model()}, full_state_dict=True, rank=0)
    with pytest.raises(ValueError, match="Could not find a distributed model"):
        module._load_checkpoint(tmp_path / "c", {"model": model()})
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        module._save_checkpoint(tmp_path / "folder", {"model": model()}, full_state_dict=True, rank=0)


_ONE_RANK = r"""
import json, os, sys, tempfile, pathlib, torch, torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
import lightning_fabric.strategies.fsdp as lf, lightning_fabric.strategies.model_parallel as lmp
import fabric_core.strategies.fsdp as of, fabric_core.strategies.model_parallel as omp
dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
out, tmp = {}, pathlib.Path(tempfile.mkdtemp())
def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
flat = FullyShardedDataParallel(net(), use_orig_params=False, device_id=torch.device("cpu"))
sharded = fully_shard(net())
for name, f, mp in (("lightning", lf, lmp), ("ours", of, omp)):
    opt = torch.optim.SGD(flat.parameters(), lr=0.1)
    with f._get_full_state_dict_context(flat, world_size=1, rank0_only=False):
        full_keys = sorted(flat.state_dict())
    with f._get_sharded_state_dict_context(flat):
        sharded_keys = sorted(flat.state_dict())
    fresh = fully_shard(net())
    threes = {k: torch.full_like(v.full_tensor(), 3.0) for k, v in sharded.state_dict().items()}
    mp._load_raw_module_state(threes, fresh)
    with mp._FSDPNoSync(sharded, True):
        paused = [sharded._get_fsdp_state()._fsdp_param_group.reduce_grads]
    paused.append(sharded._get_fsdp_state()._fsdp_param_group.reduce_grads)
    out[name] = {
        "fsdp1": [f._has_fsdp_modules(flat), f._has_fsdp_modules(sharded)],
        "flat": [f._optimizer_has_flat_params(opt)],
        "dtensor": [mp._has_dtensor_modules(sharded), mp._has_dtensor_modules(flat)],
        "keys": [full_keys, sharded_keys],
        "loaded": sorted({float(v.full_tensor().unique()[0]) for v in fresh.state_dict().values()}),
        "paused": paused,
    }
for writer, reader in ((lmp, omp), (omp, lmp)):
    for full in (True, False):
        path = tmp / f"{writer.__name__}-{full}"
        src, dst = fully_shard(net()), fully_shard(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))
        writer._save_checkpoint(path, {"model": src, "step": 7}, full_state_dict=full, rank=0)
        state = {"model": dst, "step": 0}
        rest = reader._load_checkpoint(path, state)
        same = all(torch.equal(a.full_tensor(), b.full_tensor()) for a, b in zip(src.parameters(), dst.parameters()))
        out[f"{writer.__name__}->{full}"] = [same, state["step"], sorted(rest)]
print(json.dumps(out))
dist.destroy_process_group()
"""


@pytest.mark.multiprocess
def test_fsdp_helpers_on_a_real_process_group(tmp_path: Path) -> None:
    init = f"file://{tmp_path / 'rendezvous'}"
    result = subprocess.run(
        [sys.executable, "-c", _ONE_RANK, init], capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["ours"] == out["lightning"]
    assert out["ours"]["fsdp1"] == [True, False] and out["ours"]["dtensor"] == [True, False]
    assert out["ours"]["flat"] == [True] and out["ours"]["loaded"] == [3.0]
    assert out["ours"]["paused"] == [False, True]
    checkpoints = {k: v for k, v in out.items() if "->" in k}
    assert len(checkpoints) == 4 and all(v == [True, 7, []] for v in checkpoints.values()), checkpoints
