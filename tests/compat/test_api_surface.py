"""Lightning Fabric's API surface, compared name by name and parameter by parameter with ours.

Every public name, class member and parameter of the installed ``lightning_fabric`` must exist at the same
path under ``fabric_core`` (``lightning_fabric.X.Y`` -> ``fabric_core.X.Y``), and every default must match;
so must every module-level name of every Lightning module, private ones included (real code imports
``_lazy_load``, ``_XLA_AVAILABLE``, ...), except for the entries of ``known_differences.py``; an entry that no
longer differs fails too.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

pytest.importorskip("lightning_fabric")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import compat_surface as surface
import known_differences as known
import lightning_absent
import lightning_reexports


@functools.cache
def _report() -> surface.Report:
    return surface.compare()


def _failure(title: str, keys: list[str], hint: str) -> str:
    lines = [f"{len(keys)} {title} (counts per module, then each):", *surface.iter_summary(keys), ""]
    lines += [f"  {key}" for key in sorted(keys)]
    lines += ["", hint]
    return "\n".join(lines)


_ADD = "Add it under fabric_core, or add an entry to tests/compat/known_differences.py with the reason."
_STALE = "These no longer differ: delete their entries from tests/compat/known_differences.py."


def test_every_public_module_imports() -> None:
    missing = [m for m in _report().modules if m not in known.MODULES]
    assert not missing, _failure("module paths of lightning_fabric do not import under fabric_core", missing, _ADD)


def test_every_public_name_exists() -> None:
    missing = [n for n in _report().names if n not in known.NAMES]
    assert not missing, _failure("public names of lightning_fabric are missing under fabric_core", missing, _ADD)


def test_every_parameter_exists() -> None:
    missing = [p for p in _report().params if p not in known.PARAMS]
    assert not missing, _failure("parameters of lightning_fabric's public API are missing", missing, _ADD)


def test_parameter_defaults_match() -> None:
    report = _report()
    differing = [f"{key}: {report.defaults[key]}" for key in report.defaults if key not in known.DEFAULTS]
    assert not differing, _failure("parameter defaults differ from lightning_fabric's", differing, _ADD)


def test_positional_arguments_bind_to_the_same_parameters() -> None:
    """``DDPStrategy(accelerator, devices)``: what Lightning binds by position binds to the same name here."""
    report = _report()
    differing = [f"{key}: {report.positions[key]}" for key in report.positions if key not in known.POSITIONS]
    assert not differing, _failure("positional parameters differ from lightning_fabric's", differing, _ADD)


@functools.cache
def _private() -> tuple[list[str], int]:
    return surface.missing_module_level_names()


def test_every_module_level_name_exists() -> None:
    """Private names included: ``from lightning.fabric.utilities.load import _lazy_load`` works on fabric-core."""
    missing = [n for n in _private()[0] if n not in known.MODULE_LEVEL]
    assert not missing, _failure("module-level names of lightning_fabric are missing under fabric_core", missing, _ADD)


def test_the_module_level_walk_sees_private_names() -> None:
    _, compared = _private()
    assert compared > 800, compared
    import lightning_fabric.utilities.load

    names = surface.module_level_names(lightning_fabric.utilities.load)
    assert {"_lazy_load", "_NotYetLoadedTensor", "_METADATA_FILENAME", "_PATH"} <= set(names)
    assert not {"Optional", "torch", "override", "TYPE_CHECKING", "os"} & set(names)  # imports are not names


def test_the_reexport_table_matches_lightning() -> None:
    """``_lightning/paths/reexported_names.py`` is what ``lightning_reexports.py --write`` makes of this Lightning."""
    from fabric_core._lightning.paths.reexported_names import REEXPORTS

    assert lightning_reexports.table() == REEXPORTS, "run `python tests/compat/lightning_reexports.py --write`"


def test_the_absent_plugin_table_matches_lightning() -> None:
    """``_lightning/paths/absent_names.py`` is what ``lightning_absent.py --write`` makes of this Lightning."""
    from fabric_core._lightning.paths.absent_names import ABSENT_NAMES

    assert lightning_absent.table() == ABSENT_NAMES, "run `python tests/compat/lightning_absent.py --write`"


@pytest.mark.parametrize("section", ["MODULES", "NAMES", "PARAMS", "DEFAULTS", "POSITIONS", "MODULE_LEVEL"])
def test_allow_list_has_no_stale_entries(section: str) -> None:
    report = _report()
    found = {
        "MODULES": set(report.modules),
        "NAMES": set(report.names),
        "PARAMS": set(report.params),
        "DEFAULTS": set(report.defaults),
        "POSITIONS": set(report.positions),
        "MODULE_LEVEL": set(_private()[0]),
    }[section]
    stale = [key for key in getattr(known, section) if key not in found]
    assert not stale, _failure(f"{section} entries are stale", stale, _STALE)


def test_allow_list_entries_are_well_formed() -> None:
    for section in ("MODULES", "NAMES", "PARAMS", "DEFAULTS", "POSITIONS", "MODULE_LEVEL"):
        for key, (kind, reason) in getattr(known, section).items():
            assert key.startswith("lightning_fabric"), key
            assert kind in (known.GAP, known.DELIBERATE), (key, kind)
            assert reason.strip() and "\n" not in reason, key


def test_the_walk_sees_lightnings_whole_api() -> None:
    """A walk that silently found nothing would pass every test above: check it saw what a user imports."""
    report = _report()
    assert report.compared_names > 500 and report.compared_params > 500, report
    modules = surface.public_modules()
    assert "lightning_fabric.strategies.ddp" in modules and "lightning_fabric.utilities.seed" in modules
    assert not any(part.startswith("_") for m in modules for part in m.split("."))
    import lightning_fabric.fabric

    assert "Fabric" in surface.public_names(lightning_fabric.fabric)
    assert "Any" not in surface.public_names(lightning_fabric.fabric)  # typing imports are not API
    assert "setup_module" in surface.public_members(lightning_fabric.fabric.Fabric)
