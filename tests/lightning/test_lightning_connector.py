"""Lightning's ``_Connector`` and ours, called the same way: the same errors (type and key phrase), the same results.

Each case was found by running Lightning's ``tests_fabric/test_connector.py`` in zero-edit mode. Where a test
pretends hardware, it patches the names Lightning's tests patch (``accelerators.cuda.num_cuda_devices``,
``MPSAccelerator.is_available``, the ``_XLA_AVAILABLE`` flags) on both packages. Skipped where
``lightning_fabric`` is not installed (the ``compat`` test extra).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("lightning_fabric")
pytest.importorskip("fabric_core_ddp")

from tests.lightning_side_by_side import PACKAGES, module, pretend_xla


def connect(package: str, **kwargs: Any) -> Any:
    return module(package, "connector")._Connector(**kwargs)


def both(call: Callable[[str], Any]) -> list[tuple[str, Any]]:
    """``call(package)`` for each package: ``("ok", result)`` or ``(error class, message)``."""
    outcomes: list[tuple[str, Any]] = []
    for package in PACKAGES:
        try:
            outcomes.append(("ok", call(package)))
        except Exception as error:  # compared below
            outcomes.append((type(error).__name__, error))
    return outcomes


def same_error(call: Callable[[str], Any], builtin: type[Exception], phrase: str) -> None:
    """Both raise, ours an error that ``except <builtin>`` catches as Lightning's, both messages with ``phrase``."""
    (theirs, their_error), (ours, our_error) = both(call)
    assert theirs != "ok" and isinstance(their_error, builtin), (theirs, their_error)
    assert ours != "ok" and isinstance(our_error, builtin), (ours, our_error)
    for message in (str(their_error), str(our_error)):
        assert re.search(phrase, message), (phrase, message)


def same_result(call: Callable[[str], Any]) -> Any:
    (theirs, expected), (ours, got) = both(call)
    assert theirs == ours == "ok", (expected, got)
    assert got == expected
    return got


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Pretend ``n`` CUDA devices and no MPS, where Lightning's tests patch them, on both packages."""

    def pretend(n: int) -> None:
        for package in PACKAGES:
            monkeypatch.setattr(module(package, "accelerators.cuda"), "num_cuda_devices", lambda: n)
            monkeypatch.setattr(module(package, "accelerators.mps").MPSAccelerator, "is_available", lambda: False)

    return pretend


@pytest.fixture
def tpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """Lightning's ``mock_tpu_available``, for both packages: the flags, stand-ins for torch_xla, ``n`` devices."""

    def pretend(n: int) -> None:
        pretend_xla(monkeypatch, n)
        for package in PACKAGES:
            monkeypatch.setattr(module(package, "accelerators.mps").MPSAccelerator, "is_available", lambda: False)

    yield pretend


# -- devices -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("accelerator", ["cpu", "cuda", "mps", "tpu"])
@pytest.mark.parametrize("devices", ["0", 0, []])
def test_no_device_is_refused_before_the_accelerator_is_looked_at(accelerator: str, devices: Any) -> None:
    phrase = rf"`Fabric\(devices={re.escape(repr(devices))}\)` value is not a valid input using {accelerator} accel"
    same_error(lambda p: connect(p, accelerator=accelerator, devices=devices), ValueError, phrase)


@pytest.mark.parametrize("devices", [["0"], [0, "1"], [["0", "1"], [0, 1]], [False]])
def test_device_ids_of_another_type_are_a_type_error(cuda: Callable[[int], None], devices: Any) -> None:
    cuda(2)
    phrase = "must be an int, a string, a sequence of ints, but you"
    same_error(lambda p: connect(p, accelerator="gpu", devices=devices), TypeError, phrase)


@pytest.mark.parametrize(("devices", "strategy"), [(1, "SingleDeviceStrategy"), (3, "DDPStrategy")])
def test_the_decided_devices_under_lightnings_names(devices: int, strategy: str) -> None:
    def decided(package: str) -> Any:
        c = connect(package, accelerator="cpu", devices=devices)
        return (c._parallel_devices, c._devices_flag, c._num_nodes_flag, c._accelerator_flag, type(c.strategy).__name__)

    assert same_result(decided) == ([torch.device("cpu")] * devices, devices, 1, "cpu", strategy)


def test_gpu_is_the_cuda_accelerator_where_cuda_is(cuda: Callable[[int], None]) -> None:
    cuda(2)

    def decided(package: str) -> Any:
        c = connect(package, accelerator="gpu", devices=2)
        return (c._accelerator_flag, c._devices_flag, [str(d) for d in c._parallel_devices])

    assert same_result(decided) == ("cuda", [0, 1], ["cuda:0", "cuda:1"])


def test_gpu_without_a_gpu_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for package in PACKAGES:
        for path, name in (("accelerators.cuda", "CUDAAccelerator"), ("accelerators.mps", "MPSAccelerator")):
            monkeypatch.setattr(getattr(module(package, path), name), "is_available", lambda: False)
    same_error(lambda p: connect(p, accelerator="gpu"), RuntimeError, "No supported gpu backend found!")


# -- precision ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", [1, 12, "invalid"])
def test_an_unknown_precision_in_lightnings_words(precision: Any) -> None:
    same_error(lambda p: connect(p, precision=precision), ValueError, rf"Precision {re.escape(repr(precision))} is")


@pytest.mark.parametrize(
    ("precision", "expected", "warns"),
    [(16, "16-mixed", True), ("bf16", "bf16-mixed", True), ("16-mixed", "16-mixed", False), (64, "64-true", False)],
)
def test_the_precision_input_and_the_historical_spellings(
    cuda: Callable[[int], None], precision: Any, expected: str, warns: bool
) -> None:
    cuda(1)
    message = f"{precision}` is supported for historical reasons but its usage is discouraged. Please set your " + (
        f"precision to {expected} instead!"
    )

    def decided(package: str) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c = connect(package, precision=precision, accelerator="cuda")
        return c._precision_input, any(message in str(w.message) for w in caught)

    assert same_result(decided) == (expected, warns)


def test_16_mixed_on_the_cpu_warns_in_lightnings_words() -> None:
    message = "precision='16-mixed')` but AMP with fp16 is not supported on CPU. Using `precision='bf16-mixed'"

    def decided(package: str) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c = connect(package, accelerator="cpu", precision="16-mixed")
        return c._precision_input, type(c.precision).__name__, any(message in str(w.message) for w in caught)

    assert same_result(decided) == ("bf16-mixed", "MixedPrecision", True)


def test_a_precision_both_as_argument_and_in_plugins() -> None:
    def call(package: str) -> Any:
        return connect(package, precision="16-true", plugins=module(package, "plugins").Precision())

    same_error(call, ValueError, r"Received both `precision=16-true` and `plugins=")


def test_a_precision_instance_keeps_the_precision_input_at_its_default() -> None:
    def decided(package: str) -> Any:
        precision = module(package, "plugins").DoublePrecision()
        c = connect(package, plugins=precision)
        return c._precision_input, c._precision_instance is precision, c.precision is precision

    assert same_result(decided) == ("32-true", True, True)


def test_the_transformer_engine_precisions_are_names() -> None:
    # Without transformer_engine both refuse to build it, with the same error (it is a name of the catalog here).
    same_error(lambda p: connect(p, precision="transformer-engine"), ModuleNotFoundError, "transformer_engine")


# -- plugins= and strategy instances ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "named"),
    [
        (("LightningEnvironment", "SLURMEnvironment"), "ClusterEnvironment"),
        (("TorchCheckpointIO", "TorchCheckpointIO"), "CheckpointIO"),
        (("Precision", "DoublePrecision", "LightningEnvironment", "SLURMEnvironment"), "Precision, ClusterEnvironment"),
    ],
)
def test_two_items_of_one_kind_in_plugins(items: tuple[str, ...], named: str) -> None:
    paths = {"Precision": "plugins", "DoublePrecision": "plugins", "TorchCheckpointIO": "plugins.io"}

    def call(package: str) -> Any:
        made = [getattr(module(package, paths.get(i, "plugins.environments")), i)() for i in items]
        return connect(package, plugins=made)

    same_error(call, ValueError, f"Received multiple values for {named}")


def test_what_the_user_passed_under_lightnings_names() -> None:
    def decided(package: str) -> Any:
        environment = module(package, "plugins.environments").LightningEnvironment()
        io = module(package, "plugins.io").TorchCheckpointIO()
        c = connect(package, accelerator="cpu", plugins=[environment, io])
        return c._cluster_environment_flag is environment, c.checkpoint_io is io, c.cluster_environment is environment

    assert same_result(decided) == (True, True, True)
    assert same_result(lambda p: (connect(p)._cluster_environment_flag, connect(p).checkpoint_io)) == (None, None)


@pytest.mark.parametrize(
    ("devices", "accelerator"), [([torch.device("cpu")], "cuda"), ([torch.device("cuda", 0)], "cpu")]
)
def test_a_strategys_devices_of_another_type_than_the_accelerator(devices: Any, accelerator: str) -> None:
    def call(package: str) -> Any:
        return connect(
            package,
            strategy=module(package, "strategies").DDPStrategy(parallel_devices=devices),
            accelerator=accelerator,
        )

    same_error(call, ValueError, "parallel_devices set through DDPStrategy class, but accelerator set to")


def test_a_strategys_cpu_devices_decide_the_auto_accelerator(cuda: Callable[[int], None]) -> None:
    cuda(2)

    def decided(package: str) -> Any:
        strategy = module(package, "strategies").DDPStrategy(parallel_devices=[torch.device("cpu")] * 2)
        c = connect(package, strategy=strategy)
        return c._accelerator_flag, type(c.accelerator).__name__, c._parallel_devices

    assert same_result(decided) == ("cpu", "CPUAccelerator", [torch.device("cpu")] * 2)


# -- interactive sessions and the connector's module ----------------------------------------------------------------


@pytest.mark.parametrize(("strategy", "shown"), [("ddp_spawn", "ddp_spawn"), ("dp", "ddp")])
def test_a_spawning_strategy_in_an_interactive_session(
    monkeypatch: pytest.MonkeyPatch, strategy: str, shown: str
) -> None:
    for package in PACKAGES:
        monkeypatch.setattr(module(package, "connector"), "_IS_INTERACTIVE", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dp on the CPU warns that it is ddp
        same_error(
            lambda p: connect(p, strategy=strategy, accelerator="cpu", devices=2),
            RuntimeError,
            rf"strategy='{shown}'\)`.*is not compatible with an interactive environment",
        )


def test_the_default_strategy_forks_in_an_interactive_session(monkeypatch: pytest.MonkeyPatch) -> None:
    for package in PACKAGES:
        monkeypatch.setattr(module(package, "connector"), "_IS_INTERACTIVE", True)

    def decided(package: str) -> Any:
        c = connect(package, accelerator="cpu", devices=2)
        return type(c.strategy).__name__, c.strategy.launcher.is_interactive_compatible

    assert same_result(decided) == ("DDPStrategy", True)


def test_the_connector_module_has_torch_as_lightnings_does() -> None:
    assert module("fabric_core", "connector").torch is module("lightning_fabric", "connector").torch is torch


# -- TPUs, as Lightning's tests pretend them -----------------------------------------------------------------------


def test_tpus_get_the_xla_strategy_and_its_environment(tpus: Callable[[int], None]) -> None:
    tpus(8)

    def decided(package: str) -> Any:
        c = connect(package, accelerator="tpu")
        launcher = c.strategy.launcher
        return (
            type(c.accelerator).__name__,
            type(c.strategy).__name__,
            c._devices_flag,
            type(c.cluster_environment).__name__,
            launcher._start_method,
            launcher.is_interactive_compatible,
        )

    assert same_result(decided) == ("XLAAccelerator", "XLAStrategy", 8, "XLAEnvironment", "fork", True)


def test_tpus_are_chosen_first_and_fsdp_is_xla_fsdp(tpus: Callable[[int], None]) -> None:
    tpus(8)
    names = same_result(lambda p: [type(connect(p, strategy=s).strategy).__name__ for s in ("auto", "fsdp")])
    assert names == ["XLAStrategy", "XLAFSDPStrategy"]


def test_a_tpu_with_another_strategy_in_lightnings_words(tpus: Callable[[int], None]) -> None:
    tpus(8)
    phrase = "The `XLAAccelerator` can only be used with a `SingleDeviceXLAStrategy`, `XLAStrategy`, or"
    same_error(lambda p: connect(p, accelerator="tpu", precision="16-true", strategy="ddp"), ValueError, phrase)

    def instance(package: str) -> Any:
        accelerator = module(package, "accelerators.xla").XLAAccelerator()
        precision = module(package, "plugins").XLAPrecision("16-true")
        return connect(
            package, strategy=module(package, "strategies").DDPStrategy(accelerator=accelerator, precision=precision)
        )

    same_error(instance, ValueError, phrase)


def test_the_xla_strategy_takes_only_the_xla_precision(tpus: Callable[[int], None]) -> None:
    tpus(8)

    def call(package: str) -> Any:
        strategies = module(package, "strategies")
        accelerator = module(package, "accelerators.xla").XLAAccelerator()
        return strategies.XLAStrategy(accelerator=accelerator, precision=module(package, "plugins").Precision())

    same_error(call, TypeError, "can only work with the `XLAPrecision` plugin")


def test_torch_xla_installed_but_no_tpu(monkeypatch: pytest.MonkeyPatch, tpus: Callable[[int], None]) -> None:
    tpus(0)
    same_error(lambda p: connect(p, accelerator="tpu", devices=8), RuntimeError, "XLAAccelerator` can not run on your")


# -- environments ----------------------------------------------------------------------------------------------------


def test_lsf_reads_its_hosts_and_node_rank_through_lightnings_methods(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    rankfile = tmp_path / "ranks"
    rankfile.write_text("launch\nnode0\nnode1\n")
    for name, value in (
        ("LSB_JOBID", "1"),
        ("LSB_DJOB_RANKFILE", str(rankfile)),
        ("JSM_NAMESPACE_LOCAL_RANK", "0"),
        ("JSM_NAMESPACE_SIZE", "2"),
        ("JSM_NAMESPACE_RANK", "1"),
    ):
        monkeypatch.setenv(name, value)

    def read(package: str) -> Any:
        lsf = module(package, "plugins.environments").LSFEnvironment
        with monkeypatch.context() as patch:
            patch.setattr(lsf, "_get_node_rank", lambda self: 1)
            hosts = lsf._read_hosts()
            return hosts, lsf().node_rank()

    assert same_result(read) == (["node0", "node1"], 1)
