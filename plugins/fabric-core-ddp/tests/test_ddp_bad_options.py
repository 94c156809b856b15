"""Options of ``spec("ddp", ...)`` are checked when ``Fabric(...)`` builds the strategy, not at ``setup``."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from fabric_core import Fabric, spec
from fabric_core.errors import ArgumentTypeError, InvalidConfigError, UnknownOptionError
from fabric_core.testing import make_manager
from fabric_core_ddp import _plugin
from fabric_core_ddp.ddp import DDPStrategy


def make_fabric(strategy: Any) -> Fabric:
    return Fabric(accelerator="cpu", devices=2, strategy=strategy, plugin_manager=make_manager(("ddp", _plugin)))


BAD: list[tuple[Any, type[Exception], str]] = [
    (
        spec("ddp", bogus_option=1),
        UnknownOptionError,
        r"DDPStrategy\(bogus_option=1\).*Accepted options:.*static_graph",
    ),
    (spec("ddp", static_grap=True), UnknownOptionError, r"'static_grap'.*Did you mean 'static_graph'"),
    (spec("ddp_spawn", find_unused=True), UnknownOptionError, r"Did you mean 'find_unused_parameters'"),
    (spec("ddp", timeout="soon"), ArgumentTypeError, r"timeout='soon'.*datetime.timedelta.*number of seconds"),
    (spec("ddp", timeout=-1), InvalidConfigError, r"timeout=-1.*positive"),
]


@pytest.mark.parametrize(("strategy", "error", "pattern"), BAD, ids=[repr(s) for s, _, _ in BAD])
def test_bad_options_fail_at_construction(strategy: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern) as info:
        make_fabric(strategy)
    assert isinstance(info.value, (TypeError, ValueError))  # what Python (or torch) raised for these


def test_good_options_still_reach_ddp_and_the_timeout_may_be_seconds() -> None:
    fabric = make_fabric(spec("ddp", static_graph=True, timeout=120, bucket_cap_mb=5))
    strategy = fabric.strategy
    assert isinstance(strategy, DDPStrategy)
    assert strategy.ddp_kwargs == {"static_graph": True, "bucket_cap_mb": 5}
    assert strategy._timeout == datetime.timedelta(seconds=120)
