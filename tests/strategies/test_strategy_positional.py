"""Strategies built with positional arguments bind them as Lightning Fabric does.

``SingleDeviceStrategy("cpu", accelerator)`` or ``DDPStrategy(accelerator, devices)`` is how some Lightning code
builds a strategy. Each case builds the same strategy with the same positional arguments in both libraries and
compares what each parameter became; too many positional arguments, or one given twice, is a ``TypeError``
that names the parameters.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch

from fabric_core.errors import ArgumentTypeError

lightning_strategies = pytest.importorskip("lightning_fabric.strategies")
lightning_accelerators = pytest.importorskip("lightning_fabric.accelerators")

CPU = torch.device("cpu")


def _ours(name: str) -> Any:
    return getattr(importlib.import_module("fabric_core.strategies"), name)


def _accelerator(lightning: bool) -> Any:
    if lightning:
        return lightning_accelerators.CPUAccelerator()
    from fabric_core.accelerators import CPUAccelerator

    return CPUAccelerator()


# (strategy, positional arguments given an accelerator, what to read back from the built strategy)
CASES: list[tuple[str, Callable[[Any], tuple[Any, ...]], Callable[[Any], Any]]] = [
    ("SingleDeviceStrategy", lambda acc: (CPU, acc), lambda s: (s.root_device, type(s.accelerator).__name__)),
    (
        "DDPStrategy",
        lambda acc: (acc, [CPU, CPU], None, None, None, "gloo", timedelta(seconds=42)),
        lambda s: (type(s.accelerator).__name__, s.parallel_devices, s.process_group_backend, s._timeout),
    ),
    ("DataParallelStrategy", lambda acc: (acc, [CPU]), lambda s: (type(s.accelerator).__name__, s.parallel_devices)),
    (
        "FSDPStrategy",
        lambda acc: (acc, [CPU, CPU], None, None, "gloo"),
        lambda s: (type(s.accelerator).__name__, s.parallel_devices, s.process_group_backend),
    ),
    (
        "DeepSpeedStrategy",
        lambda acc: (acc, True, 3),
        lambda s: (type(s.accelerator).__name__, s.config["zero_optimization"]["stage"]),
    ),
]


@pytest.mark.parametrize(("name", "args", "read"), CASES, ids=[case[0] for case in CASES])
def test_positional_arguments_bind_as_in_lightning(
    name: str, args: Callable[..., Any], read: Callable[..., Any]
) -> None:
    if name == "DeepSpeedStrategy":
        pytest.importorskip("deepspeed")
    theirs = getattr(lightning_strategies, name)(*args(_accelerator(lightning=True)))
    ours = _ours(name)(*args(_accelerator(lightning=False)))
    assert read(ours) == read(theirs)


def test_too_many_or_repeated_positional_arguments_name_the_parameters() -> None:
    strategy = _ours("SingleDeviceStrategy")
    with pytest.raises(
        TypeError, match=r"at most 4 positional arguments \(device, accelerator, checkpoint_io, precision\)"
    ):
        strategy(CPU, None, None, None, "extra")
    with pytest.raises(ArgumentTypeError, match="'device' both by position and by keyword"):
        strategy(CPU, device=CPU)
