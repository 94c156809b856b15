"""The CUDA accelerator's device setup, the TF32 hint, and finding usable GPUs.

This machine has no GPU: where a test needs one, it patches the plugin's probe or torch's device queries
(hardware this machine lacks), nothing else.
"""

from __future__ import annotations

import logging

import pytest
import torch

from fabric_core.errors import InvalidConfigError
from fabric_core_cuda import accelerator, device
from fabric_core_cuda.accelerator import CUDAAccelerator, hint_tf32

RANK_ZERO_LOGGER = "fabric_core.utilities.rank_zero"


@pytest.fixture
def ampere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend cuda:0 is an A100 (compute capability 8.0) and no hint was given yet."""
    accelerator.hint_tf32.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA A100-SXM4-80GB")


def test_setup_device_rejects_a_device_of_another_type() -> None:
    with pytest.raises(InvalidConfigError, match=r"Device should be CUDA, got cpu instead"):
        CUDAAccelerator().setup_device(torch.device("cpu"))


def test_teardown_without_cuda_does_nothing() -> None:
    CUDAAccelerator().teardown()
    assert not torch.cuda.is_initialized()  # type: ignore[no-untyped-call]


def test_tf32_hint_is_logged_once_on_rank_zero(ampere: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=RANK_ZERO_LOGGER):
        hint_tf32(torch.device("cuda", 0))
        hint_tf32(torch.device("cuda", 0))
    (record,) = caplog.records
    assert "NVIDIA A100-SXM4-80GB" in record.getMessage()
    assert "torch.set_float32_matmul_precision('high')" in record.getMessage()
    assert "('NVIDIA A100-SXM4-80GB') that has Tensor Cores" in record.getMessage()  # Lightning's phrase


def test_no_tf32_hint_once_the_user_chose_a_precision(ampere: None, caplog: pytest.LogCaptureFixture) -> None:
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with caplog.at_level(logging.INFO, logger=RANK_ZERO_LOGGER):
            hint_tf32(torch.device("cuda", 0))
    finally:
        torch.set_float32_matmul_precision(previous)
    assert caplog.records == []


def test_no_tf32_hint_before_ampere(
    ampere: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (7, 0))
    with caplog.at_level(logging.INFO, logger=RANK_ZERO_LOGGER):
        hint_tf32(torch.device("cuda", 0))
    assert caplog.records == []


def test_no_tf32_hint_on_other_ranks(
    ampere: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RANK", "1")
    with caplog.at_level(logging.INFO, logger=RANK_ZERO_LOGGER):
        hint_tf32(torch.device("cuda", 0))
    assert caplog.records == []


# --- find_usable_cuda_devices ------------------------------------------------------------------------------


def test_parsed_indices_become_devices_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lightning's contract: get_parallel_devices takes what parse_devices returned; raw forms are parsed first.
    monkeypatch.setattr(accelerator, "num_cuda_devices", lambda: 4)
    assert CUDAAccelerator.get_parallel_devices([]) == []
    assert CUDAAccelerator.get_parallel_devices([3, 1]) == [torch.device("cuda", 3), torch.device("cuda", 1)]
    assert CUDAAccelerator.get_parallel_devices(2) == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert CUDAAccelerator.get_parallel_devices("1,2") == [torch.device("cuda", 1), torch.device("cuda", 2)]


def test_zero_devices_is_an_empty_list() -> None:
    assert accelerator.find_usable_cuda_devices(0) == []


@pytest.mark.parametrize("bad", [-2, 1.5, "2", True])
def test_a_bad_count_is_rejected(bad: object) -> None:
    with pytest.raises(InvalidConfigError, match=r"find_usable_cuda_devices\(num_devices="):
        accelerator.find_usable_cuda_devices(bad)  # type: ignore[arg-type]


def test_no_visible_gpu_is_an_error() -> None:
    with pytest.raises(InvalidConfigError, match="there are no visible CUDA devices"):
        accelerator.find_usable_cuda_devices(1)


def test_more_than_visible_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator, "num_cuda_devices", lambda: 2)
    with pytest.raises(InvalidConfigError, match="find 3 devices but this machine only has 2 GPUs"):
        accelerator.find_usable_cuda_devices(3)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_devices_that_cannot_allocate_are_not_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVML "sees" two GPUs, but this build of torch cannot allocate on them: the real probe process says so.
    monkeypatch.setattr(accelerator, "num_cuda_devices", lambda: 2)
    with pytest.raises(RuntimeError, match=r"find 2 devices but only 0 are .* devices \[0, 1\] are occupied"):
        accelerator.find_usable_cuda_devices(2)
    assert not torch.cuda.is_initialized()  # type: ignore[no-untyped-call]


def test_the_first_usable_devices_are_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator, "num_cuda_devices", lambda: 4)
    monkeypatch.setattr(device, "usable_among", lambda indices: [i for i in indices if i != 1])
    assert accelerator.find_usable_cuda_devices(2) == [0, 2]
    assert accelerator.find_usable_cuda_devices(-1) == [0, 2, 3]
    with pytest.raises(RuntimeError, match=r"only 3 are currently available. The devices \[1\] are occupied"):
        accelerator.find_usable_cuda_devices(4)


def test_lightnings_cuda_helpers_at_the_accelerators_cuda_path() -> None:
    import fabric_core.accelerators.cuda as ours

    theirs = pytest.importorskip("lightning_fabric.accelerators.cuda")
    assert ours is accelerator
    assert ours.num_cuda_devices() == theirs.num_cuda_devices() == torch.cuda.device_count()
    assert ours.is_cuda_available() is theirs.is_cuda_available() is torch.cuda.is_available()
    assert ours.find_usable_cuda_devices(0) == theirs.find_usable_cuda_devices(0) == []
