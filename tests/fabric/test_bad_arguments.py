"""Bad arguments to ``Fabric(...)`` and its methods: each is refused early, naming the value and what is valid."""

from __future__ import annotations

import datetime
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fabric_core import Fabric, spec
from fabric_core._kernel.selection import select
from fabric_core.errors import (
    ArgumentTypeError,
    InvalidConfigError,
    NoLoggerError,
    ParentNotADirectoryError,
    PathIsADirectoryError,
    UnknownOptionError,
)
from fabric_core.loggers.csv_logs import CSVLogger
from fabric_core.precision.mixed import MixedPrecision
from fabric_core.strategies.parallel import ParallelStrategy
from fabric_core.testing import make_manager
from fabric_core.utilities.seed import seed_everything


def make_fabric(**kwargs: Any) -> Fabric:
    return Fabric(accelerator="cpu", plugin_manager=make_manager(), **kwargs)


# -- Fabric(...) ------------------------------------------------------------------------------------------------

CONSTRUCTION: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"loggers": [object()]}, ArgumentTypeError, r"loggers=.*<object object at .*Logger instance"),
    ({"loggers": 42}, ArgumentTypeError, r"loggers=42.*'csv'.*Logger instance"),
    (
        {"strategy": "single_device", "devices": 2},
        InvalidConfigError,
        r"strategy='single_device'.*devices=2.*one device",
    ),
    ({"strategy": "single_device", "num_nodes": 2}, InvalidConfigError, r"strategy='single_device'.*num_nodes=2"),
    ({"devices": 10**9}, InvalidConfigError, r"devices=1000000000.*at most \d+ processes"),
    ({"devices": str(10**9)}, InvalidConfigError, r"devices=1000000000.*at most \d+ processes"),
    ({"strategy": spec("single_device", bogus_option=1)}, UnknownOptionError, r"no option 'bogus_option'.*device"),
    ({"loggers": spec("csv", root_dri="x")}, UnknownOptionError, r"'root_dri'.*Did you mean 'root_dir'.*prefix"),
    (
        {"precision": spec("bf16-mixed", scalr=1)},
        UnknownOptionError,
        r"MixedPrecision has no option 'scalr'.*Did you mean 'scaler'",
    ),
]


#: Test ids without memory addresses, so that every collecting process (pytest-xdist's workers) names them alike.
CONSTRUCTION_IDS = [re.sub(r" at 0x[0-9a-f]+", "", repr(kwargs)) for kwargs, _, _ in CONSTRUCTION]


@pytest.mark.parametrize(("kwargs", "error", "pattern"), CONSTRUCTION, ids=CONSTRUCTION_IDS)
def test_bad_construction_arguments_are_refused_naming_the_value(
    kwargs: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        make_fabric(**kwargs)


def test_a_wrong_type_is_a_type_error_too() -> None:
    with pytest.raises(TypeError):
        make_fabric(loggers=42)
    with pytest.raises(TypeError, match="bogus_option"):
        make_fabric(strategy=spec("single_device", bogus_option=1))


def test_a_duck_typed_logger_and_a_single_device_strategy_on_auto_devices_are_fine(tmp_path: Path) -> None:
    class Printer:
        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            self.seen = metrics

        def log_hyperparams(self, params: Any) -> None:
            pass

    printer = Printer()
    fabric = make_fabric(loggers=[printer, CSVLogger(tmp_path)], strategy="single_device", devices=1)
    fabric.log("x", 1.0)
    assert printer.seen == {"x": 1.0}


def test_the_device_ceiling_on_cpu_is_explained() -> None:
    from fabric_core.accelerators.cpu import CPUAccelerator, max_cpu_processes

    ceiling = max_cpu_processes()
    assert ceiling >= 64
    assert len(CPUAccelerator.get_parallel_devices(ceiling)) == ceiling
    with pytest.raises(InvalidConfigError, match=rf"devices={ceiling + 1}.*at most {ceiling} processes.*cores"):
        CPUAccelerator.parse_devices(ceiling + 1)


def test_an_index_parser_refuses_a_huge_count_before_allocating() -> None:
    from fabric_core.utilities.device_parser import parse_device_ids

    with pytest.raises(InvalidConfigError, match=r"devices=1000000000000.*only has: \[0, 1\]"):
        parse_device_ids(10**12, [0, 1], accelerator="cuda")


def test_a_precision_named_in_plugins_is_resolved_as_precision_is() -> None:
    fabric = make_fabric(plugins=["bf16-mixed"])
    assert isinstance(fabric.strategy.precision, MixedPrecision)
    assert fabric.strategy.precision.device == "cpu"
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert select(make_manager(), plugins=[spec("bf16")]).context.precision == "bf16-mixed"


@pytest.mark.parametrize(
    ("plugins", "shown"), [(["bf16-mixed"], r"'bf16-mixed'"), ([spec("64-true")], r"spec\('64-true'\)")]
)
def test_the_precision_and_plugins_conflict_shows_what_the_user_passed(plugins: list[Any], shown: str) -> None:
    with pytest.raises(InvalidConfigError, match=rf"Received both `precision=32-true` and `plugins={shown}`") as info:
        make_fabric(precision="32-true", plugins=plugins)
    assert "_Choice" not in str(info.value) and "Entry(" not in str(info.value)


def test_the_timeout_of_a_parallel_strategy_is_checked_at_construction() -> None:
    class Parallel(ParallelStrategy):
        def setup_module(self, module: torch.nn.Module) -> torch.nn.Module:
            return module

    assert Parallel(timeout=90)._timeout == datetime.timedelta(seconds=90)
    assert Parallel(timeout=2.5)._timeout == datetime.timedelta(seconds=2.5)
    assert Parallel(timeout=datetime.timedelta(minutes=1))._timeout == datetime.timedelta(minutes=1)
    with pytest.raises(ArgumentTypeError, match=r"timeout='soon'.*timedelta.*number of seconds"):
        Parallel(timeout="soon")  # type: ignore[arg-type]
    for bad in (0, -5, True):
        with pytest.raises(InvalidConfigError, match=rf"timeout={bad!r}"):
            Parallel(timeout=bad)


# -- methods ----------------------------------------------------------------------------------------------------


@pytest.fixture
def fabric() -> Fabric:
    return make_fabric()


def _model() -> torch.nn.Module:
    return torch.nn.Linear(2, 2)


CALLS: list[tuple[str, Callable[[Fabric, Path], Any], type[Exception], str]] = [
    ("setup(None)", lambda f, _: f.setup(None), TypeError, r"setup\(module=None\).*torch.nn.Module"),
    ("setup(model, 'opt')", lambda f, _: f.setup(_model(), "opt"), TypeError, r"'opt'.*torch.optim.Optimizer"),
    ("setup_module(3)", lambda f, _: f.setup_module(3), TypeError, r"setup_module\(module=3\).*Module"),
    ("setup_optimizers('o')", lambda f, _: f.setup_optimizers("o"), TypeError, r"'o'.*Optimizer"),
    (
        "clip_gradients(model, None)",
        lambda f, _: f.clip_gradients(f.setup(_model()), None, max_norm=1.0),
        TypeError,
        r"clip_gradients\(.*optimizer=None\).*Optimizer",
    ),
    ("save(path, [1, 2])", lambda f, p: f.save(p / "c.pt", [1, 2]), TypeError, r"state=\[1, 2\].*dict"),
    ("load(path, 'model')", lambda f, p: f.load(p / "c.pt", "model"), TypeError, r"state='model'.*dict"),
    ("save('')", lambda f, _: f.save("", {}), InvalidConfigError, r"save\(path=''\).*empty"),
    (
        "save under a file",
        lambda f, p: f.save(p / "file" / "c.pt", {}),
        ParentNotADirectoryError,
        r"c\.pt'.*'.*file' is a file",
    ),
    (
        "save deep under a file",
        lambda f, p: f.save(p / "file" / "sub" / "c.pt", {}),
        NotADirectoryError,
        r"'.*file' is a file",
    ),
    ("save(existing_dir)", lambda f, p: f.save(p / "folder", {}), PathIsADirectoryError, r"folder'.*is a folder"),
    ("logger with none", lambda f, _: f.logger, NoLoggerError, r"no logger.*Fabric\(loggers="),
]


@pytest.mark.parametrize(("call", "error", "pattern"), [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_bad_calls_are_refused_naming_the_argument(
    fabric: Fabric, tmp_path: Path, call: Callable[[Fabric, Path], Any], error: type[Exception], pattern: str
) -> None:
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "folder").mkdir()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(error, match=pattern) as info:
        call(fabric, tmp_path)
    assert ".tmp" not in str(info.value)
    assert sorted(os.listdir(tmp_path)) == before  # nothing written, no temp file left
    assert list((tmp_path / "folder").iterdir()) == []


def test_path_errors_are_the_os_errors_lightning_raises(fabric: Fabric, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        fabric.save(tmp_path / "file" / "c.pt", {})
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        fabric.save(tmp_path / "folder", {})
    fabric.save(tmp_path / "new" / "deeper" / "c.pt", {"a": 1})  # missing parents are still created
    assert fabric.load(tmp_path / "new" / "deeper" / "c.pt") == {"a": 1}


@pytest.mark.parametrize("seed", ["abc", "12x", "", [1, 2], object()])
def test_seed_everything_refuses_a_seed_that_is_not_an_integer(seed: Any) -> None:
    # Lightning documents a ValueError for a seed that cannot be cast to int; a wrong type is a TypeError too.
    with pytest.raises(ValueError, match=r"seed_everything\(seed=.*\).*integer.*0.*4294967295") as info:
        seed_everything(seed)
    assert isinstance(info.value, InvalidConfigError)
    assert repr(seed) in str(info.value)
    assert isinstance(info.value, TypeError) == (not isinstance(seed, str))


def test_seed_everything_still_takes_integer_strings_and_numpy_ints() -> None:
    assert seed_everything("7", verbose=False) == 7
    assert seed_everything(torch.tensor(3).item(), verbose=False) == 3


def test_a_single_device_strategy_instance_keeps_its_device_whatever_devices_says() -> None:
    """As Lightning's connector (its test_connector.py::test_custom_accelerator): the instance brings its device;
    only the name `single_device` with several devices is refused (above), since it would use only the first."""
    from fabric_core.strategies.single_device import SingleDeviceStrategy

    class OwnStrategy(SingleDeviceStrategy):
        pass

    strategy = OwnStrategy(device=torch.device("cpu"))
    fabric = make_fabric(strategy=strategy, devices=2)
    assert fabric.strategy is strategy and fabric.world_size == 1
