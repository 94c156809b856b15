"""Real torch_xla runs on the CPU (``PJRT_DEVICE=CPU``): training, precision and checkpoints.

Marked ``xla`` and skipped where torch_xla is not importable; ``scripts/xla_cpu_check.sh`` builds a venv
with torch 2.9 + torch_xla 2.9 and runs them. One device only: with ``CPU_NUM_DEVICES=2``, torch_xla 2.9
deadlocks in a bare ``xm.all_reduce`` across its device threads, so the multi-device strategy cannot be
exercised on the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabric_core import Fabric
from fabric_core.testing import make_manager
from fabric_core_xla import _plugin

pytestmark = [
    pytest.mark.xla,
    pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="needs torch_xla"),
]


@pytest.fixture(autouse=True)
def _pjrt_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    yield


def make_fabric(**kwargs: Any) -> Fabric:
    return Fabric(accelerator="tpu", plugin_manager=make_manager(("xla", _plugin)), **kwargs)


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    weight = torch.tensor([[0.5], [-1.0], [2.0], [0.25]])
    out = []
    for _ in range(10):
        x = torch.randn(16, 4, generator=generator)
        out.append((x, x @ weight))
    return out


def train(fabric: Fabric, model: Any, optimizer: Any) -> list[float]:
    losses = []
    for x, y in data():
        x, y = fabric.to_device((x, y))
        loss = nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def run_fresh(code: str) -> None:
    """Run ``code`` in a new interpreter: whether the XLA runtime started is a per-process fact."""
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.timeout(150)
def test_the_probe_sees_the_cpu_device_without_starting_the_runtime() -> None:
    run_fresh(
        "import torch_xla\n"
        "from fabric_core_xla import device\n"
        "assert device.num_xla_devices() == 1 and device.is_available()\n"
        "assert not torch_xla._XLAC._xla_runtime_is_initialized()\n"
    )


def test_single_device_training_lowers_the_loss() -> None:
    fabric = make_fabric()
    assert type(fabric.strategy).__name__ == "SingleDeviceXLAStrategy"
    assert type(fabric.strategy.precision).__name__ == "XLAPrecision"
    assert fabric.device.type == "xla"
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert next(model.parameters()).device.type == "xla"
    losses = train(fabric, model, optimizer)
    assert losses[-1] < 0.2 * losses[0], losses


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    fabric = make_fabric()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    model, optimizer = fabric.setup(model, torch.optim.Adam(model.parameters(), lr=0.05))
    train(fabric, model, optimizer)
    path = tmp_path / "ckpt.pt"
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": 10})
    # The file holds CPU tensors: readable without torch_xla.
    raw = torch.load(path, weights_only=True)
    assert {t.device.type for t in raw["model"].values()} == {"cpu"}

    fresh = nn.Linear(4, 1)
    fresh_model, fresh_optimizer = fabric.setup(fresh, torch.optim.Adam(fresh.parameters(), lr=0.05))
    state: dict[str, Any] = {"model": fresh_model, "optimizer": fresh_optimizer, "step": 0}
    assert fabric.load(path, state) == {}
    assert state["step"] == 10
    for key, value in model.state_dict().items():
        assert torch.equal(value.cpu(), fresh_model.state_dict()[key].cpu()), key
    assert fresh_optimizer.state_dict()["state"][0]["step"].item() == 10


def test_bf16_true_keeps_parameters_in_bf16_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XLA_USE_BF16", raising=False)
    fabric = make_fabric(precision="bf16-true")
    assert os.environ.get("XLA_USE_BF16") == "1"
    model = nn.Linear(4, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert next(model.parameters()).dtype == torch.bfloat16
    losses = train(fabric, model, optimizer)
    assert losses[-1] < losses[0]
    assert model(torch.zeros(2, 4, device=fabric.device)).dtype == torch.float32
    fabric.strategy.teardown()
    assert "XLA_USE_BF16" not in os.environ


@pytest.mark.parametrize(
    ("name", "precision"),
    [("TPUPrecision", "32-true"), ("XLABf16Precision", "bf16-true"), ("TPUBf16Precision", "bf16-true")],
)
def test_lightnings_deprecated_precisions_are_xla_precisions(
    name: str, precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fabric_core.plugins.precision.tpu as deprecated

    monkeypatch.delenv("XLA_USE_BF16", raising=False)
    with pytest.warns(DeprecationWarning, match=rf"`{name}` class is deprecated"):
        plugin = getattr(deprecated, name)()
    assert plugin.precision == precision
    assert os.environ.get("XLA_USE_BF16") == ("1" if precision == "bf16-true" else None)
    plugin.teardown()


def test_collectives_on_one_device_are_the_identity() -> None:
    fabric = make_fabric()
    tensor = torch.arange(3.0, device=fabric.device)
    assert torch.equal(fabric.all_reduce(tensor, reduce_op="sum").cpu(), torch.arange(3.0))
    assert fabric.broadcast({"a": 1}) == {"a": 1}
    fabric.barrier()


@pytest.mark.timeout(150)
def test_the_multi_process_strategy_keeps_away_from_the_device_before_launch() -> None:
    run_fresh(
        "import pytest, torch, torch_xla\n"
        "from fabric_core_xla.strategy import XLAStrategy\n"
        "strategy = XLAStrategy(parallel_devices=[torch.device('xla', 0), torch.device('xla', 1)])\n"
        "assert (strategy.global_rank, strategy.local_rank, strategy.world_size) == (0, 0, 1)\n"
        "assert strategy.all_gather(torch.ones(2)).shape == (2,)\n"
        "assert strategy.broadcast('x') == 'x'\n"
        "with pytest.raises(RuntimeError, match='before the processes are launched'):\n"
        "    strategy.root_device\n"
        "assert not torch_xla._XLAC._xla_runtime_is_initialized()\n"
    )


def test_xla_fsdp_refuses_joint_setup_and_a_bad_state_dict_type() -> None:
    from fabric_core.errors import InvalidConfigError
    from fabric_core_xla.fsdp import XLAFSDPStrategy

    with pytest.raises(InvalidConfigError, match="valid choices are 'sharded' and 'full'"):
        XLAFSDPStrategy(state_dict_type="dcp")  # type: ignore[arg-type]
    model = nn.Linear(2, 2)
    with pytest.raises(InvalidConfigError, match=r"create the optimizer from `model\.parameters"):
        XLAFSDPStrategy().setup_module_and_optimizers(model, [torch.optim.SGD(model.parameters(), lr=0.1)])
