"""The installed distribution, its registrations, and Fabric(precision="nf4") end to end on the CPU."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
import torch
from torch import nn

from fabric_core import Fabric, spec
from fabric_core._fabric.assembly import build
from fabric_core._kernel.registry import Registry
from fabric_core._kernel.selection import select
from fabric_core.errors import UnknownNameError
from fabric_core.testing import make_manager
from fabric_core_bitsandbytes import _plugin
from fabric_core_bitsandbytes.precision import MODES, BitsandbytesPrecision


def manager() -> object:
    return make_manager(("bitsandbytes", _plugin))


def test_entry_point_is_in_the_fabric_core_plugins_group() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="fabric_core.plugins") if ep.name == "bitsandbytes"]
    assert ep.value == "fabric_core_bitsandbytes._plugin"
    assert ep.dist is not None and ep.dist.name == "fabric-core-bitsandbytes"
    assert ep.load() is _plugin


def test_distribution_requires_the_core_and_bitsandbytes() -> None:
    requires = metadata.requires("fabric-core-bitsandbytes") or []
    assert sorted(requires) == ["bitsandbytes>=0.45", "fabric-core<0.2,>=0.1"]


def test_registers_one_precision_per_mode() -> None:
    registry = Registry("precision", "bitsandbytes")
    _plugin.fabric_core_register_precisions(registry=registry)
    assert [e.name for e in registry.entries] == list(MODES) == list(_plugin.MODES)
    for entry in registry.entries:
        assert dict(entry.defaults) == {"mode": entry.name}
        assert entry.requires == ("bitsandbytes",) and entry.missing_requirements() == []
        assert entry.target == "fabric_core_bitsandbytes.precision:BitsandbytesPrecision"


@pytest.mark.timeout(60)
def test_importing_the_registration_module_imports_neither_torch_nor_bitsandbytes() -> None:
    code = (
        "import sys, fabric_core_bitsandbytes, fabric_core_bitsandbytes._plugin; "
        "heavy = sorted(m for m in ('torch', 'bitsandbytes') if m in sys.modules); "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_is_selectable_by_name(mode: str) -> None:
    selection = select(manager(), accelerator="cpu", devices=1, precision=mode)
    built = build(selection).precision
    assert isinstance(built, BitsandbytesPrecision) and built.mode == mode
    assert selection.context.precision == mode


def test_options_through_spec() -> None:
    selection = select(manager(), accelerator="cpu", devices=1, precision=spec("nf4", ignore_modules=["head"]))
    assert build(selection).precision.ignore_modules == frozenset({"head"})


def test_an_unknown_mode_names_the_close_one() -> None:
    with pytest.raises(UnknownNameError, match=r"Did you mean 'nf4'"):
        select(manager(), accelerator="cpu", devices=1, precision="nf5")


def test_fabric_sets_up_a_quantized_model_and_trains_its_other_layers() -> None:
    fabric = Fabric(accelerator="cpu", devices=1, precision="nf4-dq", plugin_manager=manager())
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4), nn.LayerNorm(4))
    model = fabric.setup_module(model)
    assert type(model.module[0]).__name__ == "NF4DQLinear"
    assert model.module[0].weight.dtype == torch.uint8  # quantized when fabric moved the model to the device
    dtype = fabric.strategy.precision.dtype
    assert model.module[3].weight.dtype == dtype  # the rest of the model computes in the same dtype
    output = model(torch.randn(8, 16))
    assert output.dtype == torch.float32
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.module[3].parameters(), lr=0.1))
    before = model.module[3].weight.detach().clone()
    fabric.backward(output.pow(2).mean())
    optimizer.step()
    assert not torch.equal(before, model.module[3].weight)


def test_fabric_init_module_creates_quantized_layers() -> None:
    fabric = Fabric(accelerator="cpu", devices=1, precision="int8", plugin_manager=manager())
    with fabric.init_module():
        model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    assert [type(m).__name__ for m in model] == ["Int8Linear", "Int8Linear"]
    assert nn.Linear is torch.nn.modules.linear.Linear  # restored after the block
    model = fabric.setup(model)
    assert model.module[0].weight.dtype == torch.int8
    assert model(torch.ones(2, 8)).dtype == torch.float32
