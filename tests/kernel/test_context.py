"""``fabric_core._kernel.context``: what selection knows (``SelectionContext``) and what it decided (``Decision``).

The module is a leaf: the hook specifications, the built-in plugin, the manager and selection share its types
without importing one another, so importing it must load nothing else of fabric-core and no torch.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from fabric_core._kernel.context import Decision, SelectionContext
from fabric_core._kernel.registry import Catalog
from fabric_core._kernel.selection import select
from fabric_core.plugin_api import Decision as ContractDecision
from fabric_core.plugin_api import SelectionContext as ContractSelectionContext
from fabric_core.testing import make_manager


def test_the_contract_hands_plugins_these_very_types() -> None:
    assert (ContractDecision, ContractSelectionContext) == (Decision, SelectionContext)


def test_importing_the_module_loads_no_other_fabric_core_module_and_no_torch() -> None:
    code = (
        "import json, sys\n"
        "import fabric_core._kernel.context\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('fabric_core')), 'torch' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    modules, torch_loaded = json.loads(done.stdout)
    # the package's __init__ (lazy exports) and its version leaf, then the module itself: nothing else
    assert set(modules) <= {"fabric_core", "fabric_core._version", "fabric_core._kernel", "fabric_core._kernel.context"}
    assert "fabric_core._kernel.context" in modules
    assert torch_loaded is False


def test_a_context_counts_one_process_per_device_and_at_least_one() -> None:
    catalog = Catalog([])
    assert SelectionContext(catalog).num_processes == 1  # nothing chosen yet: still one process
    assert SelectionContext(catalog).world_size == 1
    three = SelectionContext(catalog, parallel_devices=("cpu",) * 3, num_nodes=2)
    assert (three.num_processes, three.world_size) == (3, 6)
    defaults = SelectionContext(catalog)
    assert (defaults.devices, defaults.num_nodes, defaults.interactive, defaults.devices_from_environment) == (
        "auto",
        1,
        False,
        False,
    )


def test_hooks_cannot_change_what_selection_knows_or_decided() -> None:
    context = SelectionContext(Catalog([]), accelerator="cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.accelerator = "cuda"  # type: ignore[misc]
    decision = Decision("precision", "bf16-mixed", "requested")
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.value = "32-true"  # type: ignore[misc]
    assert (decision.plugin, decision.hook, decision.target) == (None, None, None)
    # a step is what replaces one: the same fields, one changed
    assert dataclasses.replace(context, strategy="single_device").accelerator == "cpu"


def test_a_real_selection_fills_the_context_and_records_each_step() -> None:
    selection = select(make_manager(), accelerator="cpu", devices=1, precision="bf16-mixed")
    context = selection.context
    assert isinstance(context, SelectionContext)
    assert (context.accelerator, context.device_type, context.strategy, context.precision) == (
        "cpu",
        "cpu",
        "single_device",
        "bf16-mixed",
    )
    assert (context.num_processes, context.world_size) == (1, 1)
    assert all(isinstance(d, Decision) for d in selection.decisions)
    steps = {d.step: d for d in selection.decisions}
    assert {"accelerator", "devices", "strategy", "precision"} <= set(steps)
    assert steps["accelerator"].target == "fabric_core.accelerators.cpu:CPUAccelerator"
    assert steps["strategy"].reason == "'auto' resolved to 'single_device'"
    assert steps["precision"].hook == "builtin.fabric_core_select_precision"
