"""Arguments FSDP cannot run are refused by the plugin when ``Fabric(...)`` is built."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from fabric_core import Fabric, spec
from fabric_core.errors import FabricCoreWarning, InvalidConfigError, UnknownOptionError
from fabric_core.testing import make_manager
from fabric_core_fsdp import _plugin


def make_fabric(**kwargs: Any) -> Fabric:
    plugins: list[Any] = [("fsdp", _plugin)]
    bnb = pytest.importorskip("fabric_core_bitsandbytes._plugin") if kwargs.get("precision") == "nf4" else None
    if bnb is not None:
        plugins.append(("bitsandbytes", bnb))
    return Fabric(accelerator="cpu", devices=2, plugin_manager=make_manager(*plugins), **kwargs)


@pytest.mark.parametrize("precision", ["nf4", "64-true"])
def test_a_precision_fsdp_cannot_shard_is_refused_by_the_fsdp_plugin(precision: str) -> None:
    with pytest.raises(InvalidConfigError, match=rf"strategy='fsdp', precision='{precision}'.*'bf16-mixed'"):
        make_fabric(strategy="fsdp", precision=precision)


def test_the_fsdp_precisions_are_still_accepted() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FabricCoreWarning)
        for precision in _plugin.FSDP_PRECISIONS:
            make_fabric(strategy="fsdp", precision=precision)


def test_an_option_neither_fsdp_nor_fully_shard_takes_is_refused() -> None:
    with pytest.raises(UnknownOptionError, match=r"FSDPStrategy\(reshard_after_foward=True\).*Did you mean"):
        make_fabric(strategy=spec("fsdp", reshard_after_foward=True))
    make_fabric(strategy=spec("fsdp", ignored_params=None))  # a fully_shard option passes through
