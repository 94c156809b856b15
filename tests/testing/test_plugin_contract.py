"""Every installed first-party plugin passes the plugin contract; violations are reported."""

from __future__ import annotations

import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from fabric_core.testing import check_plugin, fake_distribution

FIRST_PARTY = sorted(
    ep.name
    for ep in metadata.entry_points(group="fabric_core.plugins")
    if ep.dist is not None and ep.dist.metadata["Name"].startswith("fabric-core-")
)


@pytest.mark.parametrize("name", FIRST_PARTY)
def test_first_party_plugin_meets_the_contract(name: str) -> None:
    assert check_plugin(name) == []


def test_first_party_plugins_are_installed() -> None:
    assert "tensorboard" in FIRST_PARTY


@pytest.mark.slow
def test_contract_violations_are_reported(tmp_path: Path) -> None:
    source = textwrap.dedent("""
        import torch  # heavy import at registration time: a violation
        from fabric_core.hookspecs import hookimpl

        def _typing_only():
            from fabric_core._kernel.registry import Registry  # private, even imported lazily: a violation

        @hookimpl
        def fabric_core_register_loggers(registry):
            registry.add("quiet", "fabric_core.loggers.csv_logs:CSVLogger", description="  ")
            registry.add("ghost", "no_such_module_xyz:Logger", description="cannot import")

        @hookimpl
        def fabric_core_register_accelerators(registry):
            registry.add("maybe", "fabric_core.accelerators.cpu:CPUAccelerator", description="probe says 1",
                         probe=__name__ + ":probe")
            registry.add("boom", "fabric_core.accelerators.cpu:CPUAccelerator", description="probe raises",
                         probe=__name__ + ":explode")

        def probe():
            return 1

        def explode():
            raise RuntimeError("no device")
    """)
    with fake_distribution(
        "bad-plugin",
        entry_points={"badplug": "badplug_mod"},
        modules={"badplug_mod.py": source},
        group="fabric_core_contract.plugins",
        root=tmp_path,
    ):
        problems = check_plugin("badplug", group="fabric_core_contract.plugins")
    text = "\n".join(problems)
    assert "imports torch" in text
    assert "badplug_mod imports the private module fabric_core._kernel.registry" in text
    assert "fabric_core.hookspecs" not in text  # a public module is fine
    assert "logger 'quiet': no description" in text
    assert "logger 'ghost': target no_such_module_xyz:Logger does not import" in text
    assert "returned 1, not a bool" in text
    assert "probe" in text and "raised RuntimeError('no device')" in text


def test_missing_plugin_is_reported() -> None:
    assert "is the plugin installed?" in check_plugin("definitely-not-installed")[0]
