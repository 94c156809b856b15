"""Lightning's private names of ``loggers.tensorboard``, compared with Lightning's own."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fabric_core.loggers.tensorboard as ours

lightning = pytest.importorskip("lightning_fabric.loggers.tensorboard")


@pytest.mark.parametrize(
    ("name", "distribution"), [("_TENSORBOARD_AVAILABLE", "tensorboard"), ("_TENSORBOARDX_AVAILABLE", "tensorboardX")]
)
def test_the_availability_flags_are_lightnings(name: str, distribution: str) -> None:
    flag = getattr(ours, name)
    assert bool(flag) is bool(getattr(lightning, name)) is True  # both are installed here
    assert distribution in str(flag)


def test_the_flags_import_from_the_lightning_path() -> None:
    from fabric_core.loggers.tensorboard import _TENSORBOARD_AVAILABLE, _TENSORBOARDX_AVAILABLE

    assert _TENSORBOARD_AVAILABLE is ours._TENSORBOARD_AVAILABLE
    assert _TENSORBOARDX_AVAILABLE is ours._TENSORBOARDX_AVAILABLE


def test_a_missing_distribution_is_falsy_and_says_how_to_install_it() -> None:
    # Lightning's flag for a distribution that is not installed, next to ours built the same way.
    from lightning_utilities.core.imports import RequirementCache as Theirs

    from fabric_core.utilities.imports import RequirementCache as Ours

    theirs, mine = Theirs("tensorboard-nonexistent-dist"), Ours("tensorboard-nonexistent-dist")
    assert bool(theirs) is bool(mine) is False
    assert "pip install" in str(theirs) and "pip install" in str(mine)


@pytest.mark.slow
def test_checking_the_flags_imports_neither_writer() -> None:
    code = (
        "import sys, fabric_core.loggers.tensorboard as m; "
        "assert m._TENSORBOARD_AVAILABLE and m._TENSORBOARDX_AVAILABLE; "
        "print(sorted(n for n in ('tensorboard', 'tensorboardX') if n in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"
