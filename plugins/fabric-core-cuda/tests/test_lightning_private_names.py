"""Lightning's private names of ``accelerators.cuda``, called with the same inputs on both packages.

This machine has no GPU: both packages run their real code against this CPU build of torch, and where a
test needs a GPU it patches torch's device queries (and our NVML probe) for both alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
import torch

import fabric_core.accelerators.cuda as ours
from fabric_core_cuda import accelerator

lightning = pytest.importorskip("lightning_fabric.accelerators.cuda")
BOTH = pytest.mark.parametrize("module", [lightning, ours], ids=["lightning", "fabric_core"])
NAMES = ("_get_all_visible_cuda_devices", "_is_ampere_or_later", "_check_cuda_matmul_precision", "_clear_cuda_memory")


def test_every_name_is_importable_from_the_lightning_path() -> None:
    from fabric_core.accelerators.cuda import _check_cuda_matmul_precision, _clear_cuda_memory

    assert _check_cuda_matmul_precision is accelerator.hint_tf32
    assert _clear_cuda_memory is accelerator.clear_cuda_memory
    assert [name for name in NAMES if not hasattr(ours, name)] == []


@pytest.fixture(autouse=True)
def no_cuda_context() -> Iterator[None]:
    """Whatever a test does, no CUDA context is created here (nor could one be: torch is a CPU build)."""
    yield
    assert not torch.cuda.is_initialized()  # type: ignore[no-untyped-call]


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Pretend ``n`` GPUs are visible, to both packages' device counts."""

    def set_count(n: int) -> None:
        monkeypatch.setattr(accelerator, "num_cuda_devices", lambda: n)
        monkeypatch.setattr(lightning, "num_cuda_devices", lambda: n)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)

    return set_count


def test_no_gpu_is_visible_here() -> None:
    assert ours._get_all_visible_cuda_devices() == lightning._get_all_visible_cuda_devices() == []


@pytest.mark.parametrize("count", [1, 3])
def test_visible_devices_are_numbered_from_zero(gpus: Callable[[int], None], count: int) -> None:
    gpus(count)
    assert ours._get_all_visible_cuda_devices() == lightning._get_all_visible_cuda_devices() == list(range(count))


@pytest.mark.parametrize("argument", [None, 0, torch.device("cuda", 0)])
def test_asking_the_capability_without_cuda_fails_as_torch_does(argument: Any) -> None:
    errors = []
    for module in (lightning, ours):
        with pytest.raises((AssertionError, RuntimeError)) as info:
            module._is_ampere_or_later(argument)
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


@BOTH
@pytest.mark.parametrize(("capability", "expected"), [((7, 5), False), ((8, 0), True), ((9, 0), True), ((6, 1), False)])
def test_ampere_is_compute_capability_8(
    module: ModuleType, monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], expected: bool
) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability)
    assert module._is_ampere_or_later(torch.device("cuda", 1)) is expected
    assert asked == [torch.device("cuda", 1)]


@BOTH
def test_no_matmul_precision_hint_without_a_gpu(module: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        assert module._check_cuda_matmul_precision(torch.device("cuda", 0)) is None
    assert caplog.records == []


@pytest.fixture
def a100(gpus: Callable[[int], None], monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(1)
    ours._check_cuda_matmul_precision.cache_clear()  # both remember the devices they were asked about
    lightning._check_cuda_matmul_precision.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def _hints(module: ModuleType, caplog: pytest.LogCaptureFixture, precision: str = "highest") -> list[str]:
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    caplog.clear()
    try:
        with caplog.at_level(logging.INFO):
            for _ in range(2):
                module._check_cuda_matmul_precision(torch.device("cuda", 0))
    finally:
        torch.set_float32_matmul_precision(previous)
    return [r.getMessage() for r in caplog.records]


def test_an_ampere_gpu_gets_the_tf32_hint_once(a100: None, caplog: pytest.LogCaptureFixture) -> None:
    theirs, mine = _hints(lightning, caplog), _hints(ours, caplog)
    assert len(theirs) == len(mine) == 1
    for message in (theirs[0], mine[0]):
        assert "NVIDIA A100-SXM4-80GB') that has Tensor Cores" in message  # Lightning's phrase
        assert "torch.set_float32_matmul_precision(" in message


def test_the_tf32_hint_is_given_again_once_its_cache_is_cleared(a100: None, caplog: pytest.LogCaptureFixture) -> None:
    for module in (lightning, ours):
        assert len(_hints(module, caplog)) == 1
        assert _hints(module, caplog) == []  # remembered
        module._check_cuda_matmul_precision.cache_clear()
        assert len(_hints(module, caplog)) == 1


@pytest.mark.parametrize(
    ("visible", "phrase"),
    [(0, "You requested to find 2 devices but there are no visible CUDA"), (1, "this machine only has 1 GPUs")],
)
def test_finding_more_usable_gpus_than_visible(gpus: Callable[[int], None], visible: int, phrase: str) -> None:
    gpus(visible)
    for module in (lightning, ours):
        with pytest.raises(ValueError, match=phrase):
            module.find_usable_cuda_devices(2)


def test_no_tf32_hint_once_a_precision_is_chosen(a100: None, caplog: pytest.LogCaptureFixture) -> None:
    assert _hints(lightning, caplog, "high") == _hints(ours, caplog, "high") == []


@BOTH
def test_clearing_memory_without_cuda_does_nothing(module: ModuleType) -> None:
    assert module._clear_cuda_memory() is None


def test_clearing_memory_frees_the_cache_and_the_cublas_workspaces(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: calls.append("cublas"), raising=False)
    seen = []
    for module in (lightning, ours):
        calls.clear()
        module._clear_cuda_memory()
        seen.append(list(calls))
    monkeypatch.undo()
    assert seen[0] == seen[1] == ["cublas", "empty_cache"]
