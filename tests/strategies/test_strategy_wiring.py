"""The strategy wiring has one definition: constructors take it as ``**wiring``, ``connect()`` exists once.

Every strategy (the core's and the plugins') still shows and accepts Lightning's keyword arguments.
"""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

import pytest
import torch

import fabric_core.strategies as strategies
from fabric_core.accelerators.cpu import CPUAccelerator
from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.errors import UnknownOptionError
from fabric_core.io.torch_io import TorchCheckpointIO
from fabric_core.precision.precision import Precision
from fabric_core.strategies.strategy import Strategy
from fabric_core.strategies.wiring import PARALLEL_WIRING_ORDER as WIRING

CPU = torch.device("cpu")
CLASSES = (
    "SingleDeviceStrategy",
    "ParallelStrategy",
    "DDPStrategy",
    "DataParallelStrategy",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "DeepSpeedStrategy",
    "XLAStrategy",
    "XLAFSDPStrategy",
    "SingleDeviceXLAStrategy",
    "SingleTPUStrategy",
)


def _class(name: str) -> type[Strategy]:
    cls: type[Strategy] = getattr(strategies, name)
    return cls


@pytest.mark.parametrize("name", CLASSES)
def test_no_constructor_repeats_the_wiring_parameters(name: str) -> None:
    for cls in _class(name).__mro__:
        init = vars(cls).get("__init__")
        if init is None or cls is object:
            continue
        written = inspect.signature(inspect.unwrap(init), follow_wrapped=False).parameters
        assert not set(written) & set(WIRING), f"{cls.__name__}.__init__ declares wiring parameters itself"


@pytest.mark.parametrize("name", CLASSES)
def test_connect_is_defined_once(name: str) -> None:
    assert [c.__name__ for c in _class(name).__mro__ if "connect" in vars(c)] == ["Strategy"]


@pytest.mark.parametrize("name", CLASSES)
def test_every_lightning_wiring_parameter_is_shown_with_its_default(name: str) -> None:
    lightning = pytest.importorskip("lightning_fabric.strategies")
    theirs = inspect.signature(getattr(lightning, name)).parameters
    ours = inspect.signature(_class(name)).parameters
    for parameter in theirs.values():
        if parameter.name in WIRING:
            assert parameter.name in ours, f"{name}({parameter.name}=...) is missing"
            assert ours[parameter.name].default == parameter.default, parameter.name


def _lightning_wiring(**overrides: Any) -> dict[str, Any]:
    wiring = {
        "accelerator": CPUAccelerator(),
        "parallel_devices": [CPU, CPU],
        "cluster_environment": LightningEnvironment(),
        "checkpoint_io": TorchCheckpointIO(),
        "precision": Precision(),
        "process_group_backend": "gloo",
        "timeout": timedelta(seconds=75),
        "start_method": "spawn",
    }
    wiring.update(overrides)
    return wiring


@pytest.mark.parametrize("name", ["DDPStrategy", "FSDPStrategy", "DeepSpeedStrategy", "ParallelStrategy"])
def test_lightnings_eight_keywords_are_accepted_and_kept(name: str) -> None:
    wiring = _lightning_wiring()
    extra = {"precision": None} if name == "DeepSpeedStrategy" else {}  # DeepSpeed needs its own precision
    strategy: Any = _class(name)(**{**wiring, **extra})
    assert strategy.accelerator is wiring["accelerator"]
    assert strategy.parallel_devices == [CPU, CPU]
    assert strategy.cluster_environment is wiring["cluster_environment"]
    assert strategy.checkpoint_io is wiring["checkpoint_io"]
    if not extra:
        assert strategy.precision is wiring["precision"]
    assert strategy.process_group_backend == "gloo"
    assert strategy._timeout == timedelta(seconds=75)
    assert strategy.start_method == "spawn"


def test_the_wiring_defaults_are_lightnings() -> None:
    ddp = _class("DDPStrategy")()
    assert (ddp.start_method, ddp._timeout, ddp.process_group_backend) == ("popen", timedelta(minutes=30), None)  # type: ignore[attr-defined]
    assert _class("ParallelStrategy")().start_method is None  # type: ignore[attr-defined]


def test_the_model_parallel_strategy_keeps_its_own_parameters_first() -> None:
    def parallelize(module: torch.nn.Module, mesh: object) -> torch.nn.Module:
        return module

    strategy: Any = _class("ModelParallelStrategy")(parallelize, 1, 2, False, precision=Precision())
    assert strategy._parallelize_fn is parallelize
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size, strategy.state_dict_type) == (1, 2, "full")


@pytest.mark.parametrize(
    "name",
    ["SingleDeviceStrategy", "ParallelStrategy", "DataParallelStrategy", "DeepSpeedStrategy", "ModelParallelStrategy"],
)
def test_a_misspelt_wiring_keyword_fails_at_construction_with_the_choices(name: str) -> None:
    with pytest.raises(UnknownOptionError, match=r"has no option 'acelerator'.*Did you mean 'accelerator'") as info:
        _class(name)(acelerator=CPUAccelerator())
    assert isinstance(info.value, TypeError)
    assert str(info.value).startswith(f"`{name}(acelerator=")


def test_single_device_takes_the_first_connected_device_unless_given_one() -> None:
    given = _class("SingleDeviceStrategy")(device="meta", accelerator=CPUAccelerator())
    connected = _class("SingleDeviceStrategy")()
    for strategy in (given, connected):
        strategy.connect(
            accelerator=CPUAccelerator(),
            precision=Precision(),
            checkpoint_io=None,
            cluster_environment=LightningEnvironment(),
            parallel_devices=[torch.device("cpu", 0)],
            num_nodes=1,
        )
    assert (given.root_device, connected.root_device) == (torch.device("meta"), torch.device("cpu", 0))


def test_positional_order_mixes_own_parameters_and_wiring_and_makes_the_rest_keyword_only() -> None:
    from fabric_core.accelerators import CPUAccelerator
    from fabric_core.strategies.single_device import SingleDeviceStrategy
    from fabric_core.strategies.wiring import Wiring, wired

    class Ordered(SingleDeviceStrategy):
        @wired(Wiring, positional=("accelerator", "bucket"))
        def __init__(self, bucket: int = 1, note: str = "", **wiring: Any) -> None:
            super().__init__(**wiring)
            self.bucket, self.note = bucket, note

    accelerator = CPUAccelerator()
    built = Ordered(accelerator, 8, note="n")
    assert (built.accelerator, built.bucket, built.note) == (accelerator, 8, "n")
    kinds = {name: p.kind.name for name, p in inspect.signature(Ordered).parameters.items()}
    assert list(kinds)[:2] == ["accelerator", "bucket"]
    assert kinds["accelerator"] == kinds["bucket"] == "POSITIONAL_OR_KEYWORD"
    assert kinds["note"] == kinds["precision"] == "KEYWORD_ONLY"
    with pytest.raises(TypeError, match="at most 2 positional arguments"):
        Ordered(accelerator, 8, "n")
    with pytest.raises(ValueError, match=r"\['bukket'\] are not parameters"):
        wired(Wiring, positional=("bukket",))(Ordered.__init__.__wrapped__)
