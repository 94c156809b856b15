"""Plugins that misbehave: exit at import, print, share an entry-point name, answer hooks with junk,
shadow built-ins, misspell hooks; and switches with bad values. Each through real dist-info metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from fabric_core import PluginManager
from fabric_core._kernel.selection import select
from fabric_core.errors import AmbiguousNameError, PluginLoadError, PluginWarning, UnknownNameError
from fabric_core.testing import fake_distribution

GROUP = "fabric_core_isolation_test.plugins"  # private: the installed first-party plugins stay out
REAL_GROUP = "fabric_core.plugins"  # where the installed first-party plugins live (for the real scenario)

EXIT_AT_IMPORT = "import sys\nsys.exit(3)\n"
PRINT_AT_IMPORT = "print('hello from a chatty plugin')\n" + textwrap.dedent("""
    from fabric_core.hookspecs import hookimpl

    @hookimpl
    def fabric_core_register_callbacks(registry):
        print('chatty registration')
        registry.add("chatty", "fabric_core.callbacks.throughput:ThroughputMonitor", description="chatty")
""")


def strategy_plugin(name: str) -> str:
    return textwrap.dedent(f"""
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_strategies(registry):
            registry.add("{name}", "fabric_core.strategies.single_device:SingleDeviceStrategy", description="t")
    """)


def select_hook_plugin(body: str, hook: str = "fabric_core_select_strategy") -> str:
    return textwrap.dedent(f"""
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def {hook}(requested, context):
            {body}
    """)


@contextmanager
def installed(tmp_path: Path, *dists: tuple[str, str, str], group: str = GROUP) -> Iterator[list[Path]]:
    """Install fake distributions: (distribution, entry-point name, module source) each."""
    with ExitStack() as stack:
        folders = []
        for i, (dist, ep_name, source) in enumerate(dists):
            module = f"fc_iso_{dist.replace('-', '_')}_{i}"
            folders.append(
                stack.enter_context(
                    fake_distribution(
                        dist,
                        entry_points={ep_name: module},
                        modules={f"{module}.py": source},
                        group=group,
                        root=tmp_path / f"site{i}",
                    )
                )
            )
        yield folders


def manager(**kwargs: object) -> PluginManager:
    return PluginManager(group=GROUP, environ=kwargs.pop("environ", {}), **kwargs)  # type: ignore[arg-type]


def records(m: PluginManager) -> dict[str, tuple[str, str | None]]:
    return {r.name: (r.status, r.reason) for r in m.records}


def cli(*args: str, folders: list[Path] = (), env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # type: ignore[assignment]
    """Run `python -m fabric_core ...` in a fresh interpreter that sees the fake distributions."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_")}
    path = os.pathsep.join([*(str(f) for f in folders), base.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "fabric_core", *args],
        env={**base, "PYTHONPATH": path, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- 14: a plugin that exits, in the library and the CLI ------------------------------------------------


def test_plugin_calling_sys_exit_at_import_is_failed_not_fatal(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-exit", "exiter", EXIT_AT_IMPORT), ("dist-ok", "ok", strategy_plugin("fine"))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = manager()
            got = records(m)
        assert got["exiter"] == ("failed", "called sys.exit(3) at import")
        assert got["ok"][0] == "loaded" and m.catalog.find("strategy", "fine") is not None
        messages = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
        assert len(messages) == 1 and "dist-exit" in messages[0] and "sys.exit(3)" in messages[0]
        with pytest.raises(PluginLoadError, match=r"sys\.exit\(3\)"):
            manager(strict=True).catalog  # noqa: B018


def test_keyboard_interrupt_at_import_still_interrupts(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-int", "interrupter", "raise KeyboardInterrupt\n")):
        with pytest.raises(KeyboardInterrupt):
            manager().catalog  # noqa: B018


def test_hooks_that_exit_mark_their_plugin_failed(tmp_path: Path) -> None:
    registering = textwrap.dedent("""
        import sys
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_strategies(registry):
            sys.exit(4)
    """)
    selecting = select_hook_plugin("raise SystemExit('no')")
    with installed(tmp_path, ("dist-r", "reg", registering), ("dist-s", "sel", selecting)):
        with pytest.warns(PluginWarning):
            m = manager()
            selection = select(m, accelerator="cpu")
        assert selection.context.strategy == "single_device"
        got = records(m)
        assert got["reg"] == ("failed", "fabric_core_register_strategies called sys.exit(4)")
        assert got["sel"] == ("failed", "fabric_core_select_strategy called sys.exit('no')")


def test_cli_survives_a_plugin_that_exits_at_import(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-exit", "exiter", EXIT_AT_IMPORT), group=REAL_GROUP) as folders:
        done = cli("list-plugins", "--json", folders=folders)
    assert done.returncode == 0, done.stderr
    plugins = {p["name"]: p for p in json.loads(done.stdout)["plugins"]}
    assert plugins["exiter"]["status"] == "failed"
    assert plugins["exiter"]["reason"] == "called sys.exit(3) at import"
    assert plugins["ddp"]["status"] == "loaded"


# -- 15: output at import stays off stdout in the CLI ------------------------------------------------------


def test_cli_json_stays_parseable_when_a_plugin_prints(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-chatty", "chatty", PRINT_AT_IMPORT), group=REAL_GROUP) as folders:
        done = cli("list-plugins", "--json", folders=folders)
        table = cli("list-plugins", folders=folders)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert "chatty" in [c["name"] for c in data["components"]]
    assert "hello from a chatty plugin" in done.stderr and "chatty registration" in done.stderr
    assert "hello from a chatty plugin" not in table.stdout and "chatty" in table.stdout


# -- 16: two distributions, one entry-point name -------------------------------------------------------------


def test_unrelated_entry_point_named_ddp_does_not_displace_the_ddp_plugin(tmp_path: Path) -> None:
    unrelated = strategy_plugin("something_else")
    alone = PluginManager(environ={}).catalog  # a plugin is reachable by its distribution's name too
    assert alone.get("strategy", "fabric-core-ddp:ddp") is alone.get("strategy", "ddp:ddp")
    with installed(tmp_path, ("unrelated-dist", "ddp", unrelated), group=REAL_GROUP):
        with pytest.warns(PluginWarning, match=r"fabric-core-ddp.*unrelated-dist|unrelated-dist.*fabric-core-ddp"):
            m = PluginManager(environ={})
            selection = select(m, accelerator="cpu", devices=2, strategy="ddp")
        assert selection.strategy.entry is not None
        assert selection.strategy.entry.target.startswith("fabric_core_ddp.")
        by_dist = {r.distribution: r for r in m.records}
        assert by_dist["fabric-core-ddp"].status == "loaded"
        assert by_dist["unrelated-dist"].status == "loaded"
        assert m.catalog.get("strategy", "unrelated-dist:something_else").plugin == "unrelated-dist"
        assert m.catalog.get("strategy", "fabric-core-ddp:ddp").target.startswith("fabric_core_ddp.")
        # blocking one by its distribution leaves the other
        blocked = PluginManager(environ={"FABRIC_CORE_BLOCK_PLUGINS": "unrelated-dist"})
        by_dist = {r.distribution: r.status for r in blocked.records}
        assert (by_dist["unrelated-dist"], by_dist["fabric-core-ddp"]) == ("blocked", "loaded")
        assert blocked.catalog.find("strategy", "ddp") is not None
        blocked = PluginManager(environ={"FABRIC_CORE_BLOCK_PLUGINS": "fabric-core-ddp"})
        by_dist = {r.distribution: r.status for r in blocked.records}
        assert (by_dist["unrelated-dist"], by_dist["fabric-core-ddp"]) == ("loaded", "blocked")
        assert blocked.catalog.find("strategy", "something_else") is not None
        # an allow-list may name a distribution, spelled either way, and nothing is reported missing
        with warnings.catch_warnings():
            warnings.simplefilter("error", PluginWarning)
            allowed = PluginManager(environ={"FABRIC_CORE_PLUGINS": "Unrelated_Dist"})
            by_dist = {r.distribution: r.status for r in allowed.records}
        assert (by_dist["unrelated-dist"], by_dist["fabric-core-ddp"]) == ("loaded", "blocked")
        with pytest.raises(UnknownNameError, match="'fabric-core-ddp' is installed but not listed in FABRIC_CORE_PL"):
            select(allowed, accelerator="cpu", devices=2, strategy="ddp")


def test_two_distributions_registering_one_component_are_ambiguous_with_qualified_names(tmp_path: Path) -> None:
    dup = strategy_plugin("dup")
    with installed(tmp_path, ("dist-one", "same", dup), ("dist-two", "same", dup)):
        with pytest.warns(PluginWarning, match="dist-one.*dist-two|dist-two.*dist-one"):
            m = manager()
            catalog = m.catalog
        assert sorted(r.distribution or "" for r in m.records if r.status == "loaded") == ["", "dist-one", "dist-two"]
        with pytest.raises(AmbiguousNameError) as info:
            catalog.get("strategy", "dup")
        assert "'dist-one:dup'" in str(info.value) and "'dist-two:dup'" in str(info.value)
        with pytest.raises(AmbiguousNameError):
            catalog.get("strategy", "same:dup")  # the shared plugin name does not choose
        assert catalog.get("strategy", "dist-two:dup").plugin == "dist-two"


# -- 17: selection hooks that answer with the wrong type -------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [("42", "42"), ("['ddp']", "['ddp']"), ("object()", "<object object")])
def test_selection_hook_returning_a_wrong_type_is_failed_and_named(tmp_path: Path, value: str, shown: str) -> None:
    with installed(tmp_path, ("dist-junk", "junk", select_hook_plugin(f"return {value}"))):
        with pytest.warns(PluginWarning) as caught:
            m = manager()
            selection = select(m, accelerator="cpu")
        assert selection.context.strategy == "single_device"
        status, reason = records(m)["junk"]
        assert status == "failed"
        assert reason is not None and "fabric_core_select_strategy returned" in reason and shown in reason
        assert "expected a component name (str), a spec(...) or None" in reason
        assert any("'junk'" in str(w.message) and "dist-junk" in str(w.message) for w in caught)
        with pytest.raises(PluginLoadError, match="fabric_core_select_strategy returned"):
            select(manager(strict=True), accelerator="cpu")


# -- 18: a shadowed built-in name behaves as the warning says -----------------------------------------------


def test_plugin_registering_cpu_leaves_the_builtin_cpu_in_charge(tmp_path: Path) -> None:
    source = textwrap.dedent("""
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_accelerators(registry):
            registry.add("cpu", "fabric_core.accelerators.cpu:CPUAccelerator", description="my cpu")
    """)
    with installed(tmp_path, ("dist-cpu", "mycpu", source)):
        with pytest.warns(PluginWarning, match="the built-in one is used"):
            m = manager()
            selection = select(m)
        assert selection.accelerator.entry is not None and selection.accelerator.entry.plugin == "builtin"
        assert select(m, accelerator="mycpu:cpu").accelerator.entry.plugin == "mycpu"  # type: ignore[union-attr]


# -- 19: switches with bad values ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", ",,,", " , "])
def test_blank_allow_list_is_treated_as_unset_with_a_warning(tmp_path: Path, value: str) -> None:
    with installed(tmp_path, ("dist-a", "a", strategy_plugin("aa"))):
        with pytest.warns(PluginWarning, match=r"FABRIC_CORE_PLUGINS=.* is empty.*FABRIC_CORE_DISABLE_PLUGIN_AUTOLOAD"):
            m = manager(environ={"FABRIC_CORE_PLUGINS": value})
        assert records(m)["a"][0] == "loaded"


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"FABRIC_CORE_PLUGINS": "ddp"}, "not listed in FABRIC_CORE_PLUGINS"),
        ({"FABRIC_CORE_BLOCK_PLUGINS": "fsdp"}, "blocked by FABRIC_CORE_BLOCK_PLUGINS"),
    ],
)
def test_unknown_name_of_an_installed_but_unusable_plugin_says_why(environ: dict[str, str], says: str) -> None:
    m = PluginManager(environ=environ)
    with pytest.raises(UnknownNameError) as info:
        select(m, accelerator="cpu", devices=2, strategy="fsdp")
    assert "The plugin 'fsdp' (fabric-core-fsdp) is installed but " + says in str(info.value)
    assert "pip install" not in str(info.value)


def test_unknown_name_of_a_failed_plugin_names_the_failure(tmp_path: Path) -> None:
    with installed(tmp_path, ("dist-broken", "broken", "raise RuntimeError('kaputt')\n")):
        with pytest.warns(PluginWarning):
            m = manager()
            with pytest.raises(UnknownNameError) as info:
                m.catalog.get("strategy", "broken")
    assert "The plugin 'broken' (dist-broken) is installed but failed (import failed: RuntimeError('kaputt'))" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"FABRIC_CORE_LOG": "verbose"},
            "FABRIC_CORE_LOG='verbose' is not a log level; use one of debug, info, warning",
        ),
        (
            {"FABRIC_CORE_LOG": "info", "FABRIC_CORE_LOG_FORMAT": "xml"},
            "FABRIC_CORE_LOG_FORMAT='xml' is not a log format; use one of console, json",
        ),
    ],
)
def test_bad_log_switches_say_so_in_one_line(env: dict[str, str], says: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_CORE_")}
    code = "import fabric_core as fc; fc.PluginManager().catalog; fc.PluginManager().catalog"  # events, no torch
    done = subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120, check=True
    )
    lines = [line for line in done.stderr.splitlines() if says in line]
    assert len(lines) == 1, done.stderr


def test_cli_bad_boolean_switch_is_one_line_and_exit_code_2() -> None:
    done = cli("list-plugins", env={"FABRIC_CORE_STRICT_PLUGINS": "maybe"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "fabric-core list-plugins: FABRIC_CORE_STRICT_PLUGINS='maybe' is not a boolean. "
        "Use one of 1, true, yes (on) or 0, false, no (off)."
    ]


# -- 20: hook names are checked against the spec -------------------------------------------------------------


def test_misspelled_hook_fails_the_plugin_and_names_the_closest_hook(tmp_path: Path) -> None:
    typo = textwrap.dedent("""
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_logger(registry):
            registry.add("mine", "fabric_core.loggers.csv_logs:CSVLogger", description="typo")
    """)
    with installed(tmp_path, ("dist-typo", "typo", typo), ("dist-ok", "ok", strategy_plugin("fine"))):
        with pytest.warns(PluginWarning, match="fabric_core_register_logger.*fabric_core_register_loggers"):
            m = manager()
            got = records(m)
        assert got["typo"][0] == "failed"
        assert got["typo"][1] == (
            "unknown hook fabric_core_register_logger (did you mean fabric_core_register_loggers?)"
        )
        assert got["ok"][0] == "loaded" and m.catalog.find("strategy", "fine") is not None
        with pytest.raises(PluginLoadError, match="unknown hook fabric_core_register_logger"):
            manager(strict=True).catalog  # noqa: B018
    optional = (
        "from fabric_core.hookspecs import hookimpl\n@hookimpl(optionalhook=True)\ndef fabric_core_later(x): pass\n"
    )
    wrapper = textwrap.dedent("""
        from fabric_core.hookspecs import hookimpl

        @hookimpl(wrapper=True)
        def fabric_core_select_strategy(requested, context):
            return (yield)
    """)
    with installed(tmp_path / "opt", ("dist-opt", "opt", optional), ("dist-wrap", "wrap", wrapper)):
        with pytest.warns(PluginWarning, match="hook wrapper"):
            got = records(manager())
        assert got["opt"] == ("loaded", None)  # declared optional: a hook of a newer core
        assert got["wrap"] == (
            "failed",
            "fabric_core_select_strategy is a hook wrapper; fabric-core hooks take plain implementations",
        )


def test_probe_or_target_that_exits_is_unavailable_not_fatal(tmp_path: Path) -> None:
    source = textwrap.dedent("""
        import sys
        from fabric_core.hookspecs import hookimpl

        @hookimpl
        def fabric_core_register_accelerators(registry):
            registry.add("exiting", __name__ + ":Nothing", description="probe exits", priority=99,
                         probe=__name__ + ":probe")

        @hookimpl
        def fabric_core_register_loggers(registry):
            registry.add("exiting", "fc_iso_exit_target:Logger", description="target module exits")

        def probe():
            sys.exit(5)
    """)
    with installed(tmp_path, ("dist-probe", "prober", source)):
        (tmp_path / "site0" / "fc_iso_exit_target.py").write_text("import sys\nsys.exit(6)\n")
        m = manager()
        assert select(m).accelerator.entry.plugin == "builtin"  # type: ignore[union-attr]
        assert m.catalog.get("accelerator", "exiting").is_available() is False
        with pytest.raises(PluginLoadError, match=r"called sys\.exit\(6\)"):
            m.catalog.get("logger", "exiting").load()
