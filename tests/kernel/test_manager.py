"""Discovery through real dist-info metadata, isolation, switches, conflicts and versions."""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from fabric_core import PluginManager
from fabric_core.errors import (
    AmbiguousNameError,
    IncompatiblePluginError,
    InvalidConfigError,
    PluginImportError,
    PluginLoadError,
    PluginWarning,
    UnknownNameError,
)
from fabric_core.testing import fake_distribution, make_manager

GROUP = "fabric_core_test.plugins"  # a private group: installed first-party plugins never interfere


def accel_plugin(name: str, priority: int = 50, available: bool = True) -> str:
    return textwrap.dedent(f'''
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_accelerators(registry):
            registry.add("{name}", "fabric_core.accelerators.cpu:CPUAccelerator",
                         description="{name} test accelerator", priority={priority}, probe=__name__ + ":probe")

        def probe():
            return {available}
    ''')


def strategy_plugin(name: str, override: bool = False, description: str = "test strategy") -> str:
    return textwrap.dedent(f'''
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_strategies(registry):
            registry.add("{name}", "fabric_core.strategies.single_device:SingleDeviceStrategy",
                         description="{description}", override={override})
    ''')


@contextmanager
def installed(tmp_path: Path, *dists: tuple[str, str, str], requires: tuple[str, ...] = ()) -> Iterator[None]:
    """Install fake distributions: (distribution, entry-point name, module source) each."""
    with ExitStack() as stack:
        for i, (dist, ep_name, source) in enumerate(dists):
            module = f"fc_test_{dist.replace('-', '_')}_{i}"
            stack.enter_context(
                fake_distribution(
                    dist,
                    entry_points={ep_name: module},
                    modules={f"{module}.py": source},
                    requires=requires,
                    group=GROUP,
                    root=tmp_path / f"site{i}",
                )
            )
        yield


def manager(**kwargs: object) -> PluginManager:
    return PluginManager(group=GROUP, environ=kwargs.pop("environ", {}), **kwargs)  # type: ignore[arg-type]


def statuses(m: PluginManager) -> dict[str, str]:
    return {r.name: r.status for r in m.records}


def test_two_plugins_are_discovered_and_registered(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-a", "alpha", accel_plugin("alpha")), ("dist-b", "beta", strategy_plugin("beta"))):
        m = manager()
        assert statuses(m) == {"builtin": "loaded", "alpha": "loaded", "beta": "loaded"}
        assert m.catalog.get("accelerator", "alpha").plugin == "alpha"
        assert m.catalog.get("strategy", "beta").target.endswith(":SingleDeviceStrategy")
        record = next(r for r in m.records if r.name == "alpha")
        assert (record.distribution, record.version) == ("dist-a", "0.1.0")


def test_plugin_that_raises_at_import_is_isolated(tmp_path: Path) -> None:
    broken = "raise RuntimeError('broken on purpose')\n"
    with installed(tmp_path, ("dist-good", "good", accel_plugin("good")), ("dist-bad", "bad", broken)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = manager()
            _ = m.catalog
            _ = m.catalog  # warned once, not per access
        assert statuses(m)["bad"] == "failed"
        assert statuses(m)["good"] == "loaded"
        assert m.catalog.find("accelerator", "good") is not None
        messages = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
        assert len(messages) == 1
        assert "dist-bad" in messages[0] and "broken on purpose" in messages[0]


def test_plugin_whose_registration_hook_raises_loses_all_its_entries(tmp_path: Path) -> None:
    source = textwrap.dedent("""
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_strategies(registry):
            registry.add("half-done", "x.y:Z", description="registered before the crash")

        @hookimpl
        def fabric_core_register_loggers(registry):
            raise ValueError("registration exploded")
    """)
    with installed(tmp_path, ("dist-x", "exploding", source), ("dist-ok", "ok", strategy_plugin("fine"))):
        with pytest.warns(PluginWarning, match="registration exploded"):
            m = manager()
            catalog = m.catalog
        assert statuses(m)["exploding"] == "failed"
        assert catalog.find("strategy", "half-done") is None
        assert catalog.find("strategy", "fine") is not None


def test_two_distributions_with_one_entry_point_name_both_load_under_their_distribution_names(
    tmp_path: Path,
) -> None:
    with installed(tmp_path, ("dist-one", "same", accel_plugin("one")), ("dist-two", "same", accel_plugin("two"))):
        with pytest.warns(PluginWarning, match="'same' is declared by more than one distribution: dist-one, dist-two"):
            m = manager()
            records = m.records
        assert statuses(m) == {"builtin": "loaded", "dist-one": "loaded", "dist-two": "loaded"}
        assert {r.distribution for r in records} == {None, "dist-one", "dist-two"}
        assert m.catalog.get("accelerator", "one").plugin == "dist-one"
        assert m.catalog.get("accelerator", "same:two").plugin == "dist-two"  # the shared name, where unique
        assert statuses(manager(environ={"FABRIC_CORE_BLOCK_PLUGINS": "dist_two"}))["dist-two"] == "blocked"


def test_two_providers_of_one_name_are_ambiguous_until_qualified(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-p", "p", strategy_plugin("shared")), ("dist-q", "q", strategy_plugin("shared"))):
        m = manager()
        with pytest.raises(AmbiguousNameError) as info:
            m.catalog.get("strategy", "shared")
        assert info.value.providers == ["p", "q"]
        assert "'p:shared'" in str(info.value) and "'q:shared'" in str(info.value)
        assert m.catalog.get("strategy", "p:shared").plugin == "p"
        assert m.catalog.get("strategy", "Q:Shared").plugin == "q"


def test_overriding_a_builtin_name_needs_override_true(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-shadow", "shadow", strategy_plugin("single_device"))):
        with pytest.warns(PluginWarning, match="override=True"):
            m = manager()
            entry = m.catalog.get("strategy", "single_device")
        assert entry.plugin == "builtin"
        assert m.catalog.get("strategy", "shadow:single_device").plugin == "shadow"
    with installed(tmp_path / "2", ("dist-over", "over", strategy_plugin("single_device", override=True))):
        m = manager()
        assert m.catalog.get("strategy", "single_device").plugin == "over"
        assert m.catalog.get("strategy", "builtin:single_device").plugin == "builtin"


def test_incompatible_core_requirement_is_not_imported(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    source = f"open({str(marker)!r}, 'w').close()\n" + strategy_plugin("future")
    with installed(tmp_path, ("dist-future", "future", source), requires=("fabric-core>=99",)):
        with pytest.warns(PluginWarning, match=r"requires fabric-core>=99"):
            m = manager()
            assert statuses(m)["future"] == "incompatible"
        assert not marker.exists()
        assert m.catalog.find("strategy", "future") is None
    with installed(tmp_path / "ok", ("dist-now", "now", strategy_plugin("now")), requires=("fabric-core>=0.1,<1",)):
        assert statuses(manager())["now"] == "loaded"


_CORE_REQUIREMENTS = [
    *("fabric-core<0.2,>=0.1", "fabric-core>=99", "fabric_core>=99", "Fabric.Core>=99", "fabric-core<0.0.1"),
    *("fabric-core==0.1.*", "fabric-core!=0.1.0", "fabric-core~=0.1", "fabric-core>=0.1a1", "fabric-core"),
    *("fabric-core (>=99)", "fabric-core >=99", " fabric-core>=99", "fabric-core>=99,", "fabric-core[x]>=99"),
    *("fabric-core>=99; extra == 'x'", "fabric-core>=99; python_version > '3'", "fabric-core @ https://h/c.whl"),
    # invalid: never a reason to refuse a plugin
    *("fabric-core,>=99", "fabric-core>=99 junk", "fabric-core>=1.0.*", "fabric-core=99", "fabric-core(>=99"),
    *("fabric-core-ddp>=99", "torch>=99", "fabric-core2>=99"),
]


@pytest.mark.parametrize("requirement", _CORE_REQUIREMENTS)
def test_the_core_requirement_is_read_as_packagings_full_parser_reads_it(requirement: str) -> None:
    """Discovery reads the plain form without packaging's PEP 508 parser; every form ends as that parser says."""
    from packaging.requirements import InvalidRequirement, Requirement

    from fabric_core._kernel.metadata import core_requirement_problem, core_version

    try:
        req: Requirement | None = Requirement(requirement)
    except InvalidRequirement:
        req = None
    applies = (
        req is not None
        and req.name.replace("_", "-").replace(".", "-").lower() == "fabric-core"
        and (req.marker is None or req.marker.evaluate({"extra": ""}))
    )
    refused = applies and req is not None and not req.specifier.contains(core_version(), prereleases=True)
    expected = f"it requires {requirement} but fabric-core {core_version()} is installed" if refused else None
    assert core_requirement_problem([requirement]) == expected
    if requirement == "fabric-core>=99":
        assert expected is not None  # the list exercises a refusal, not only acceptances


def test_strict_mode_raises_the_typed_error(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-bad", "bad", "import not_a_module_anywhere\n")):
        with pytest.raises(PluginImportError) as info:
            manager(strict=True).catalog  # noqa: B018
        assert info.value.plugin == "bad" and info.value.distribution == "dist-bad"
    with installed(tmp_path / "v", ("dist-v", "v", strategy_plugin("v")), requires=("fabric-core<0.0.1",)):
        with pytest.raises(IncompatiblePluginError):
            manager(environ={"FABRIC_CORE_STRICT_PLUGINS": "yes"}).catalog  # noqa: B018


@pytest.mark.parametrize(
    ("environ", "kwargs", "expected"),
    [
        ({}, {}, {"a": "loaded", "b": "loaded"}),
        ({"FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD": "1"}, {}, {}),
        ({"FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD": "true"}, {"autoload": True}, {"a": "loaded", "b": "loaded"}),
        ({"FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD": "no"}, {}, {"a": "loaded", "b": "loaded"}),
        ({"FABRIC_CORE_PLUGINS": "a"}, {}, {"a": "loaded", "b": "blocked"}),
        ({"FABRIC_CORE_BLOCK_PLUGINS": "b"}, {}, {"a": "loaded", "b": "blocked"}),
        ({"FABRIC_CORE_PLUGINS": "a,b", "FABRIC_CORE_BLOCK_PLUGINS": "a"}, {}, {"a": "blocked", "b": "loaded"}),
        ({"FABRIC_CORE_BLOCK_PLUGINS": "a"}, {"block": ()}, {"a": "loaded", "b": "loaded"}),
        ({}, {"allow": ["B"]}, {"a": "blocked", "b": "loaded"}),
        ({"FABRIC_CORE_BLOCK_PLUGINS": "builtin"}, {}, {"a": "loaded", "b": "loaded"}),
    ],
)
def test_switches_and_their_precedence(
    tmp_path: Path, environ: dict[str, str], kwargs: dict[str, object], expected: dict[str, str]
) -> None:
    with installed(tmp_path, ("dist-a", "a", accel_plugin("aa")), ("dist-b", "b", strategy_plugin("bb"))):
        m = manager(environ=environ, **kwargs)
        got = statuses(m)
        assert got.pop("builtin") == "loaded"  # the built-in plugin can never be blocked
        assert got == expected
        assert (m.catalog.find("accelerator", "aa") is not None) == (expected.get("a") == "loaded")


def test_allow_list_naming_a_missing_plugin_is_reported(tmp_path: Path) -> None:
    with pytest.warns(PluginWarning, match="not installed"):
        m = manager(environ={"FABRIC_CORE_PLUGINS": "ghost"})
        assert statuses(m)["ghost"] == "blocked"


def test_bad_boolean_switch_names_the_variable() -> None:
    with pytest.raises(InvalidConfigError, match=r"FABRIC_CORE_STRICT_PLUGINS='maybe'.*1, true, yes"):
        manager(environ={"FABRIC_CORE_STRICT_PLUGINS": "maybe"})


def test_discovery_runs_once_per_manager(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    source = f"open({str(counter)!r}, 'a').write('x')\n" + strategy_plugin("once")
    with installed(tmp_path, ("dist-once", "once", source)):
        m = manager()
        for _ in range(3):
            assert m.catalog is m.catalog
            _ = m.records
        assert counter.read_text() == "x"


def test_unknown_name_error_suggests_and_hints() -> None:
    catalog = make_manager().catalog
    with pytest.raises(UnknownNameError) as info:
        catalog.get("strategy", "singel_device", argument="Fabric(strategy=...)")
    assert info.value.suggestions == ["single_device"]
    assert "Fabric(strategy='singel_device')" in str(info.value)
    with pytest.raises(UnknownNameError, match=r"pip install fabric-core-deepspeed"):
        catalog.get("strategy", "deepspeed_stage_3")
    assert isinstance(info.value, ValueError)


def test_plugins_registered_in_code_and_make_manager_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    from fabric_core._kernel.manager import plugin_module

    def register(registry: object) -> None:
        registry.add("inline", "fabric_core.loggers.csv_logs:CSVLogger", description="inline")  # type: ignore[attr-defined]

    monkeypatch.setenv("FABRIC_CORE_BLOCK_PLUGINS", "inline")  # make_manager ignores the caller's switches
    m = make_manager(plugin_module("inline", {"fabric_core_register_loggers": register}))
    assert m.catalog.get("logger", "inline").plugin == "inline"
    assert [r.name for r in m.records] == ["builtin", "inline"]


def test_selection_hook_that_crashes_is_skipped_and_recorded() -> None:
    from fabric_core._kernel.manager import plugin_module
    from fabric_core._kernel.selection import select

    def crash(requested: str, context: object) -> str:
        raise ZeroDivisionError("bad hook")

    m = make_manager(plugin_module("crashy", {"fabric_core_select_strategy": crash}))
    with pytest.warns(PluginWarning, match="bad hook"):
        selection = select(m)
    assert selection.context.strategy == "single_device"
    assert {r.name: r.status for r in m.records}["crashy"] == "failed"


def test_strict_load_error_is_a_plugin_load_error() -> None:
    assert issubclass(PluginImportError, PluginLoadError)
    assert issubclass(PluginImportError, ImportError)


def test_a_plugin_named_builtin_is_a_conflict_and_the_builtins_stay(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-impostor", "builtin", strategy_plugin("impostor"))):
        with pytest.warns(PluginWarning, match="already taken"):
            m = manager()
            records = m.records
        assert [r.status for r in records if r.name == "builtin"] == ["loaded", "conflict"]
        assert m.catalog.find("strategy", "impostor") is None
        assert m.catalog.get("strategy", "single_device").plugin == "builtin"
