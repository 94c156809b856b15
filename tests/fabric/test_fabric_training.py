"""Training through Fabric gives what the same loop gives in plain PyTorch, step for step."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabric_core.fabric import Fabric
from fabric_core.testing import make_manager


def make_fabric(**kwargs: Any) -> Fabric:
    kwargs.setdefault("accelerator", "cpu")
    return Fabric(plugin_manager=make_manager(), **kwargs)


def regression_data(seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator) + 0.1 * torch.randn(64, 1, generator=generator)
    return TensorDataset(x, y)


def build(seed: int, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(dtype)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def scheduler_for(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)


def raw_losses(epochs: int, clip: float | None = None, dtype: torch.dtype = torch.float32) -> list[float]:
    model, optimizer = build(seed=0, dtype=dtype)
    scheduler = scheduler_for(optimizer)
    torch.manual_seed(1)  # the loader's shuffling
    loader = DataLoader(regression_data(), batch_size=16, shuffle=True)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(dtype)), y.to(dtype))
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
    return losses


def fabric_losses(epochs: int, clip: float | None = None, precision: str = "32-true") -> list[float]:
    fabric = make_fabric(precision=precision)
    model, optimizer = fabric.setup(*build(seed=0))
    scheduler = scheduler_for(optimizer)  # created on the wrapper, as users do after setup
    torch.manual_seed(1)
    loader = fabric.setup_dataloaders(DataLoader(regression_data(), batch_size=16, shuffle=True))
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            if clip is not None:
                fabric.clip_gradients(model, optimizer, max_norm=clip)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
    return losses


def test_fabric_matches_raw_pytorch_step_for_step() -> None:
    expected = raw_losses(epochs=3)
    losses = fabric_losses(epochs=3)
    assert losses == expected  # bitwise: the same operations in the same order
    assert losses[-1] < losses[0] / 2


def test_fabric_matches_raw_pytorch_with_gradient_clipping() -> None:
    expected = raw_losses(epochs=2, clip=0.5)
    assert fabric_losses(epochs=2, clip=0.5) == expected


def test_double_precision_matches_raw_double_training() -> None:
    expected = raw_losses(epochs=2, dtype=torch.float64)
    losses = fabric_losses(epochs=2, precision="64-true")
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_low_precision_training_lowers_the_loss(precision: str) -> None:
    losses = fabric_losses(epochs=3, precision=precision)
    assert losses[-1] < losses[0] / 2


def test_checkpoint_resume_continues_the_same_trajectory(tmp_path: Any) -> None:
    data = regression_data()
    x, y = data.tensors

    def step(fabric: Fabric, model: Any, optimizer: Any) -> float:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        fabric.backward(loss)
        optimizer.step()
        return loss.item()

    fabric = make_fabric()
    model, optimizer = fabric.setup(*build(seed=0))
    uninterrupted = [step(fabric, model, optimizer) for _ in range(6)]

    model, optimizer = fabric.setup(*build(seed=0))
    resumed = [step(fabric, model, optimizer) for _ in range(3)]
    fabric.save(tmp_path / "mid.pt", {"model": model, "optimizer": optimizer, "step": 3})
    model, optimizer = fabric.setup(*build(seed=5))
    state = {"model": model, "optimizer": optimizer, "step": 0}
    fabric.load(tmp_path / "mid.pt", state)
    assert state["step"] == 3
    resumed += [step(fabric, model, optimizer) for _ in range(3)]
    assert resumed == uninterrupted
