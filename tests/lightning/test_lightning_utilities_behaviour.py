"""Lightning's ``utilities`` helpers compared with Lightning Fabric: the same call on both, the same result.

Lightning's tests patch names at its ``utilities`` paths (``utilities.distributed.torch``, ``..._num_cpus_available``,
``accelerators.cuda._is_ampere_or_later``, ``utilities.consolidate_checkpoint._TORCH_GREATER_EQUAL_2_3``); where a
test here patches, it patches the same name in each package. Skipped without ``lightning_fabric``.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from argparse import Namespace
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import torch

pytest.importorskip("lightning_fabric")

from tests.lightning_side_by_side import close_lightning_group

PACKAGES = ("lightning_fabric", "fabric_core")


@pytest.fixture(params=PACKAGES, ids=["lightning", "fabric-core"])
def library(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


def _module(library: ModuleType, path: str) -> ModuleType:
    return importlib.import_module(f"{library.__name__}.{path}")


# -- utilities.distributed -------------------------------------------------------------------------------
@pytest.mark.parametrize(("processes", "threads"), [(1, 4), (3, 1), (8, 1)])
def test_threads_per_process_share_the_cpus_the_module_counts(
    library: ModuleType, processes: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    distributed = _module(library, "utilities.distributed")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(distributed, "_num_cpus_available", lambda: 4)
    before = torch.get_num_threads()
    try:
        distributed._set_num_threads_if_needed(processes)
        assert (torch.get_num_threads(), os.environ["OMP_NUM_THREADS"]) == (threads, str(threads))
    finally:
        torch.set_num_threads(before)


def test_an_nccl_connection_is_closed_at_exit_through_the_modules_atexit(library: ModuleType) -> None:
    distributed = _module(library, "utilities.distributed")
    environment = _module(library, "plugins.environments").LightningEnvironment()
    with mock.patch.object(distributed, "atexit") as atexit, mock.patch("torch.distributed.init_process_group"):
        distributed._init_dist_connection(environment, "nccl")
        atexit.register.assert_called_once_with(distributed._destroy_dist_connection)
        atexit.reset_mock()
        distributed._init_dist_connection(environment, "gloo")
        atexit.register.assert_not_called()


def test_the_infinite_barrier_is_a_monitored_barrier_of_a_gloo_group_of_its_own(library: ModuleType) -> None:
    distributed = _module(library, "utilities.distributed")
    barrier = distributed._InfiniteBarrier()
    with barrier:  # no process group: nothing to wait for
        barrier()
    assert barrier.group is None
    with (
        mock.patch.object(distributed, "_distributed_is_initialized", return_value=True),
        mock.patch("torch.distributed.new_group") as new_group,
        mock.patch("torch.distributed.destroy_process_group") as destroy,
    ):
        with distributed._InfiniteBarrier() as barrier:
            assert barrier.barrier == new_group.return_value.monitored_barrier
            barrier()
        assert barrier.barrier.call_count == 2 and new_group.call_args.kwargs["backend"] == "gloo"
        destroy.assert_called_once_with(new_group.return_value)


def test_a_remote_path_counts_as_shared_and_one_process_always_shares(library: ModuleType, tmp_path: Path) -> None:
    distributed = _module(library, "utilities.distributed")
    strategy = _module(library, "strategies").SingleDeviceStrategy(device=torch.device("cpu"))
    assert distributed.is_shared_filesystem(strategy, path="s3://bucket/checkpoints")
    assert distributed.is_shared_filesystem(strategy, path=tmp_path)


def _shared_filesystem_answers(fabric: Any, folder: Path) -> dict[str, Any]:
    distributed = importlib.import_module(f"{type(fabric).__module__.split('.')[0]}.utilities.distributed")
    answers: dict[str, Any] = {}
    try:
        distributed.is_shared_filesystem(fabric.strategy, path=folder / "missing")
    except FileNotFoundError as error:
        answers["missing"] = "Unable to determine if the path belongs to a shared filesystem" in str(error)
    own = folder / f"rank-{fabric.global_rank}"
    own.mkdir(exist_ok=True)
    answers["per_rank_paths"] = distributed.is_shared_filesystem(fabric.strategy, path=own)
    answers["same_folder"] = distributed.is_shared_filesystem(fabric.strategy, path=folder)
    close_lightning_group(fabric)
    return answers


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parity
def test_shared_filesystem_answers_on_two_real_ranks(library: ModuleType, tmp_path: Path) -> None:
    fabric = library.Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    answers = fabric.launch(_shared_filesystem_answers, tmp_path)
    assert answers == {"missing": True, "per_rank_paths": False, "same_folder": True}


def test_what_presents_itself_as_a_dtensor_is_one_unless_the_torch_flag_says_too_old(
    library: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.distributed.tensor import DTensor

    distributed = _module(library, "utilities.distributed")
    assert distributed._is_dtensor(mock.Mock(spec=DTensor))
    assert not distributed._is_dtensor(torch.zeros(2, 2))
    monkeypatch.setattr(distributed, "_TORCH_GREATER_EQUAL_2_4", False)
    assert not distributed._is_dtensor(mock.Mock(spec=DTensor))


# -- throughput, AttributeDict, consolidate_checkpoint -----------------------------------------------------
@pytest.mark.parametrize("name", ["NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 4090", "Tesla T4", "TITAN RTX"])
def test_peak_flops_of_a_gpu_asks_the_cuda_paths_tensor_core_answer(library: ModuleType, name: str) -> None:
    throughput = _module(library, "utilities.throughput")
    with (
        mock.patch(f"{library.__name__}.accelerators.cuda._is_ampere_or_later", return_value=False),
        mock.patch("torch.cuda.get_device_name", return_value=name),
    ):
        flops = throughput.get_available_flops(torch.device("cuda"), torch.float32)
    assert isinstance(flops, int) and flops > 0
    lightning = importlib.import_module("lightning_fabric.utilities.throughput")
    with (
        mock.patch("lightning_fabric.accelerators.cuda._is_ampere_or_later", return_value=False),
        mock.patch("torch.cuda.get_device_name", return_value=name),
    ):
        assert flops == lightning.get_available_flops(torch.device("cuda"), torch.float32)


def test_deleting_a_missing_attribute_is_a_key_error(library: ModuleType) -> None:
    state = _module(library, "utilities").AttributeDict({"key1": 1})
    del state.key1
    assert "key1" not in state
    with pytest.raises(KeyError):
        del state.key3


def test_consolidation_refuses_a_torch_older_than_2_3_as_its_flag_says(
    library: ModuleType, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    consolidate = _module(library, "utilities.consolidate_checkpoint")
    monkeypatch.setattr(consolidate, "_TORCH_GREATER_EQUAL_2_3", False)
    with caplog.at_level(logging.ERROR), pytest.raises(SystemExit):
        consolidate._process_cli_args(Namespace(checkpoint_folder="anything", output_file=None))
    assert "requires PyTorch >= 2.3." in caplog.text


def test_materializing_modules_without_reset_parameters_warns_in_lightnings_words() -> None:
    import lightning_fabric.utilities.init as theirs

    import fabric_core.utilities.init as ours

    class NoReset(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(2))

    lines = []
    for module in (theirs, ours):
        with torch.device("meta"):
            model = torch.nn.Sequential(NoReset(), torch.nn.Linear(2, 2))
        with pytest.warns(UserWarning) as caught:
            module._materialize_distributed_module(model, torch.device("cpu"))
        lines.append(str(caught[0].message))
    pattern = r"`reset_parameters\(\)` method for re-initialization: NoReset"
    assert all(re.search(pattern, line) for line in lines), lines
