"""Registry validation, entries, specs and catalog lookups."""

from __future__ import annotations

import pytest

from fabric_core import spec
from fabric_core._kernel.registry import Catalog, Registry
from fabric_core.errors import AmbiguousNameError, InvalidConfigError, PluginImportError


def test_registry_rejects_bad_names_and_targets() -> None:
    registry = Registry("strategy", "p")
    with pytest.raises(InvalidConfigError, match="'Bad Name'"):
        registry.add("Bad Name", "a.b:C", description="x")
    with pytest.raises(InvalidConfigError, match=r"'a\.b\.C'.*module:attribute"):
        registry.add("ok", "a.b.C", description="x")
    with pytest.raises(InvalidConfigError, match="'UPPER'"):
        registry.add("ok", "a.b:C", description="x", aliases=("UPPER",))
    with pytest.raises(InvalidConfigError, match="Unknown component kind 'widget'"):
        Registry("widget", "p")


def test_entry_builds_with_defaults_overridden_by_options() -> None:
    registry = Registry("logger", "p")
    entry = registry.add(
        "csv-fast",
        "fabric_core.loggers.csv_logs:CSVLogger",
        description="x",
        defaults={"root_dir": "a", "flush_logs_every_n_steps": 5},
    )
    logger = entry.build({"root_dir": "b"})
    assert logger.root_dir == "b"
    assert logger._flush_logs_every_n_steps == 5
    assert entry.class_name == "CSVLogger" and entry.qualified_name == "p:csv-fast"


def test_missing_requirement_is_reported_before_import() -> None:
    entry = Registry("strategy", "p").add(
        "needs", "no_such_module_anywhere:X", description="x", requires=("no-such-dist-xyz>=1",)
    )
    assert entry.missing_requirements() == ["no-such-dist-xyz>=1"]
    with pytest.raises(PluginImportError, match=r"needs no-such-dist-xyz>=1.*pip install"):
        entry.load()


def test_import_failure_is_a_plugin_import_error() -> None:
    entry = Registry("strategy", "p").add("broken", "no_such_module_anywhere:X", description="x")
    with pytest.raises(PluginImportError, match="no_such_module_anywhere"):
        entry.load()


def test_probe_that_raises_counts_as_unavailable() -> None:
    registry = Registry("accelerator", "p")
    assert not registry.add("a", "x.y:Z", description="x", probe="no_such_module_anywhere:probe").is_available()
    assert registry.add("b", "x.y:Z", description="x", probe="builtins:object").is_available()
    assert registry.add("c", "x.y:Z", description="x").is_available()


def test_catalog_aliases_case_and_qualified_names() -> None:
    registry = Registry("strategy", "p")
    registry.add("thing", "a.b:C", description="x", aliases=("thing_alias",))
    catalog = Catalog(registry.entries)
    assert catalog.get("strategy", "  THING_alias ").name == "thing"
    assert catalog.get("strategy", "p:thing_alias").name == "thing"
    assert catalog.find("strategy", "q:thing") is None
    assert catalog.names("strategy") == ["thing", "thing_alias"]


def test_an_override_takes_a_name_from_a_plugin_too_and_an_extended_catalog_keeps_the_rest() -> None:
    one, two, three = Registry("strategy", "one"), Registry("strategy", "two"), Registry("strategy", "three")
    one.add("fast", "a.b:One", description="x")
    two.add("fast", "a.b:Two", description="x")
    catalog = Catalog([*one.entries, *two.entries])
    with pytest.raises(AmbiguousNameError):
        catalog.get("strategy", "fast")
    three.add("fast", "a.b:Three", description="x", override=True)
    extended = catalog.extended(three.entries, [("strategy", "fast", "three")])
    assert extended.get("strategy", "fast").plugin == "three"
    assert extended.get("strategy", "one:fast").target == "a.b:One"  # still reachable by its qualified name
    assert {e.plugin for e in extended.shadowed} == {"one", "two"}
    assert len(catalog) == 2 and len(extended) == 3  # the original is unchanged


def test_spec_is_immutable_and_validated() -> None:
    s = spec("ddp", static_graph=True)
    assert s.options["static_graph"] is True
    with pytest.raises(TypeError):
        s.options["x"] = 1  # type: ignore[index]
    assert repr(s) == "spec('ddp', static_graph=True)"
    with pytest.raises(InvalidConfigError):
        spec("")
