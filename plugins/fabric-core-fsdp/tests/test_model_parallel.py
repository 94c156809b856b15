"""ModelParallelStrategy: tensor parallel on two real processes (gloo), and its options without processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabric_core.accelerators.cpu import CPUAccelerator
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.errors import InvalidConfigError
from fabric_core.precision.precision import Precision
from fabric_core_fsdp import ModelParallelStrategy, consolidate


def identity(model: nn.Module, mesh: Any) -> nn.Module:
    return model


def connected(devices: int = 2, num_nodes: int = 1, **options: Any) -> ModelParallelStrategy:
    strategy = ModelParallelStrategy(identity, **options)
    strategy.connect(
        accelerator=CPUAccelerator(),
        precision=Precision(),
        checkpoint_io=None,
        cluster_environment=LightningEnvironment(),
        parallel_devices=[torch.device("cpu")] * devices,
        num_nodes=num_nodes,
    )
    return strategy


def test_auto_sizes_are_nodes_by_devices() -> None:
    assert connected(devices=2).mesh_shape == (1, 2)
    assert connected(devices=2, num_nodes=3).mesh_shape == (3, 2)


def test_one_size_given_the_other_fills_the_world() -> None:
    assert connected(devices=4, data_parallel_size=2).mesh_shape == (2, 2)
    assert connected(devices=4, tensor_parallel_size=1).mesh_shape == (4, 1)


def test_sizes_that_do_not_multiply_to_the_world_size_are_an_error() -> None:
    strategy = connected(devices=4, data_parallel_size=3, tensor_parallel_size=2)
    with pytest.raises(InvalidConfigError, match=r"3 x 2 = 6 ranks but the job has 4"):
        _ = strategy.mesh_shape


@pytest.mark.parametrize("size", [0, -1, "two", True])
def test_bad_sizes_are_rejected(size: Any) -> None:
    with pytest.raises(InvalidConfigError, match="positive int or 'auto'"):
        ModelParallelStrategy(identity, tensor_parallel_size=size)


def test_a_parallelize_fn_is_required() -> None:
    with pytest.raises(InvalidConfigError, match="parallelize_fn"):
        ModelParallelStrategy()


def test_the_sampler_splits_data_over_the_data_parallel_dimension_only() -> None:
    strategy = connected(devices=4, data_parallel_size=2)
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 0}


def test_save_distributed_checkpoint_false_writes_one_file() -> None:
    assert ModelParallelStrategy(identity).state_dict_type == "sharded"
    assert ModelParallelStrategy(identity, save_distributed_checkpoint=False).state_dict_type == "full"


def test_the_device_mesh_exists_only_once_launched() -> None:
    with pytest.raises(RuntimeError, match="launch"):
        _ = connected().device_mesh


# -- two real processes: tensor parallel over 2 ranks --------------------------------------------------------
@pytest.fixture(scope="module")
def tp_job(tmp_path_factory: pytest.TempPathFactory, run_job: Any, reports: Any) -> tuple[Path, list[dict[str, Any]]]:
    outdir: Path = tmp_path_factory.mktemp("model-parallel")
    run_job("model_parallel_job.py", outdir)
    return outdir, reports(outdir)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_tensor_parallel_training_matches_one_process(tp_job: tuple[Path, list[dict[str, Any]]]) -> None:
    _, ranks = tp_job
    for report in ranks:
        assert report["mesh"] == [1, 2]
        assert report["mesh_dims"] == ["data_parallel", "tensor_parallel"]
        assert report["sampler"] == {"num_replicas": 1, "rank": 0}  # both ranks of the TP group read the same data
        assert report["all_dtensor"] is True
        assert report["local_numel"] < report["total_numel"]
        assert report["diff"] < 1e-6
        norms = report["norms"]
        for sharded, reference in zip(norms[::2], norms[1::2]):
            assert sharded == pytest.approx(reference, rel=1e-5)


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_tensor_parallel_sharded_checkpoint_round_trip(tp_job: tuple[Path, list[dict[str, Any]]]) -> None:
    _, ranks = tp_job
    for report in ranks:
        assert report["loaded_step"] == 3
        assert report["loaded_diff"] < 1e-6
        assert report["loaded_lr"] == 0.01


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("check", "phrase"),
    [
        ("a_folder_that_is_no_checkpoint", "does not point to a valid checkpoint"),
        ("a_module_from_a_folder", "The given path must be a single file containing the full state dict"),
    ],
)
def test_loading_errors_are_lightnings(tp_job: tuple[Path, list[dict[str, Any]]], check: str, phrase: str) -> None:
    _, ranks = tp_job
    for report in ranks:
        if report["lightning"] is None:
            pytest.skip("lightning_fabric is not installed (the compat extra)")
        theirs, ours = report["lightning"][check]
        for is_value_error, message in (theirs, ours):
            assert is_value_error and phrase in message, message


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_tensor_parallel_checkpoints_consolidate_to_the_reference(
    tp_job: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    outdir, _ = tp_job
    reference = torch.load(outdir / "reference.pt", weights_only=True)
    merged = torch.load(consolidate(outdir / "sharded", tmp_path / "tp.pt"), weights_only=True)
    full = torch.load(outdir / "full.pt", weights_only=True)
    for checkpoint in (merged, full):
        assert list(checkpoint["model"]) == list(reference["model"])
        for name, tensor in reference["model"].items():
            assert torch.allclose(checkpoint["model"][name], tensor, atol=1e-6), name
        saved_state = checkpoint["optimizer"]["state"]
        for index, state in reference["optimizer"]["state"].items():
            assert torch.allclose(saved_state[index]["exp_avg"], state["exp_avg"], atol=1e-6)
        assert checkpoint["step"] == 3


def test_fsdp1_units_are_refused_before_the_mesh_is_needed() -> None:
    # Lightning's test_fsdp_v1_modules_unsupported: a stand-in whose `modules()` yields an FSDP1 unit.
    from unittest.mock import Mock

    from torch.distributed.fsdp import FullyShardedDataParallel

    module = Mock(modules=Mock(return_value=[Mock(spec=FullyShardedDataParallel)]))
    strategy = ModelParallelStrategy(parallelize_fn=lambda m, _: m)
    with pytest.raises(TypeError, match=r"only supports the new FSDP2 APIs in PyTorch >= 2\.4"):
        strategy.setup_module(module)


def test_lightnings_torch_guard_is_read_when_the_strategy_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's test_torch_greater_equal_2_4 patches the flag at the strategy's module.
    import fabric_core_fsdp.model_parallel as module

    monkeypatch.setattr(module, "_TORCH_GREATER_EQUAL_2_4", False)
    with pytest.raises(ImportError, match=r"ModelParallelStrategy requires PyTorch 2\.4 or higher"):
        ModelParallelStrategy(parallelize_fn=lambda m, _: m)
