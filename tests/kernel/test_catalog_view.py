"""``fabric_core._kernel.catalog_view``: Lightning-shaped views of the catalog and Lightning's own registry type.

``ACCELERATOR_REGISTRY`` / ``STRATEGY_REGISTRY`` are :class:`CatalogView` s of the process-wide manager; here
the view reads a manager that holds the built-in plugin only, so what it shows is known. The comparison with
Lightning's registries is in ``tests/lightning/test_lightning_registries_and_helpers.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import fabric_core._kernel.manager as kernel_manager
from fabric_core._kernel.catalog_view import CatalogView, NameRegistry, ReadOnlyRegistryError, plugin_export
from fabric_core._kernel.manager import IN_CODE, PluginManager
from fabric_core.accelerators import CPUAccelerator
from fabric_core.testing import make_manager


@pytest.fixture
def manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginManager]:
    """The process-wide manager replaced by one that knows the built-in plugin only (put back afterwards)."""
    fresh = make_manager()
    monkeypatch.setattr(kernel_manager, "_default", fresh)
    yield fresh


class CountingCPU(CPUAccelerator):
    def __init__(self, step: int = 1) -> None:
        super().__init__()
        self.step = step


def test_the_view_shows_the_catalog_in_lightnings_shape(manager: PluginManager) -> None:
    view = CatalogView("accelerator", "Registered Accelerators")
    assert list(view) == manager.catalog.names("accelerator") == ["cpu"]
    assert len(view) == 1 and "cpu" in view and "nope" not in view and 3 not in view
    entry = view["cpu"]
    assert set(entry) == {"description", "init_params", "accelerator", "accelerator_name"}
    assert (entry["accelerator"], entry["accelerator_name"], entry["init_params"]) == (CPUAccelerator, "cpu", {})
    assert isinstance(view.get("cpu"), CPUAccelerator)  # get builds the component
    marker = object()
    assert view.get("nope", marker) is marker
    with pytest.raises(KeyError, match=r"'nope' not found in registry\. Available names: \['cpu'\]"):
        view["nope"]
    with pytest.raises(KeyError, match="Available names"):
        view.get("nope")
    assert str(view) == "Registered Accelerators: cpu"
    assert repr(view) == "<CatalogView of the accelerators: cpu>"
    assert list(CatalogView("strategy", "Registered Strategies")) == ["single_device"]


def test_a_class_registered_in_code_joins_the_catalog_and_leaves_it(manager: PluginManager) -> None:
    view = CatalogView("accelerator", "Registered Accelerators")
    assert view.register("counting", CountingCPU, description="A CPU that counts", step=2) is CountingCPU
    found = manager.catalog.find("accelerator", "counting")
    assert found is not None and found.plugin == IN_CODE
    assert view["counting"]["init_params"] == {"step": 2}
    built = view.get("counting")
    assert isinstance(built, CountingCPU) and built.step == 2
    with pytest.raises(ValueError, match="'counting' is already present in the registry"):
        view.register("counting", CountingCPU)
    view.register("counting", CountingCPU, override=True, step=5)
    assert view.get("counting").step == 5
    view.remove("counting")
    assert "counting" not in view and manager.catalog.find("accelerator", "counting") is None


def test_register_as_a_decorator_and_its_refusals(manager: PluginManager) -> None:
    view = CatalogView("accelerator", "Registered Accelerators")

    @view.register("decorated", step=3)
    class Decorated(CountingCPU):
        pass

    assert view["decorated"]["accelerator"] is Decorated and view.get("decorated").step == 3
    with pytest.raises(TypeError, match="`name` must be a str"):
        view.register(7, CountingCPU)  # type: ignore[arg-type]
    with pytest.raises(ReadOnlyRegistryError, match="comes from the plugin 'builtin'"):
        view.remove("cpu")  # a plugin's entry: disable the plugin instead
    assert "cpu" in view
    with pytest.raises(KeyError):
        view.remove("nope")


def test_lightnings_registry_type_holds_classes_by_name() -> None:
    class Registry(NameRegistry):
        kind = "accelerator"
        title = "Registered Accelerators"

    registry = Registry()
    registry.register("counting", CountingCPU, description="counts", step=4)
    assert registry["counting"] == {
        "description": "counts",
        "init_params": {"step": 4},
        "accelerator": CountingCPU,
        "accelerator_name": "counting",
    }
    assert registry.get("counting").step == 4
    assert str(registry) == "Registered Accelerators: counting"
    with pytest.raises(ValueError, match="already present"):
        registry.register("counting", CountingCPU)
    with pytest.raises(KeyError, match=r"Available names: \['counting'\]"):
        registry.get("other")
    registry.remove("counting")
    assert dict(registry) == {}


def test_plugin_export_finds_a_name_a_plugin_package_exports(manager: PluginManager) -> None:
    import fabric_core

    # the built-in accelerator's package is fabric_core itself, whose __all__ names its public helpers
    exported: Any = plugin_export("seed_everything", "accelerator")
    assert exported is fabric_core.seed_everything
    with pytest.raises(AttributeError, match="no_such_helper"):
        plugin_export("no_such_helper", "accelerator")
