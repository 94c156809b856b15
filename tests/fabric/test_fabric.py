"""The ``Fabric`` API in one process: properties, setup, launch, collectives, callbacks, loggers."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, TensorDataset

from fabric_core.errors import PossibleUserWarning
from fabric_core.fabric import Fabric
from fabric_core.launchers.launcher import Launcher
from fabric_core.loggers.logger import Logger
from fabric_core.strategies.single_device import SingleDeviceStrategy
from fabric_core.strategies.strategy import BackwardSyncControl, Strategy
from fabric_core.testing import make_manager
from fabric_core.utilities.apply_func import convert_tensors_to_scalars
from fabric_core.wrappers import FabricDataLoader, FabricModule, FabricOptimizer


def make_fabric(**kwargs: Any) -> Fabric:
    kwargs.setdefault("accelerator", "cpu")
    return Fabric(plugin_manager=make_manager(), **kwargs)


class RecordingLogger(Logger):
    def __init__(self) -> None:
        self.records: list[tuple[dict[str, Any], int | None]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.records.append((dict(metrics), step))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class MultiProcessStrategy(SingleDeviceStrategy):
    """Claims to need launched processes, but runs in this one (no launcher): enough to test the rule."""

    single_process = False

    def __init__(self) -> None:
        super().__init__()
        self.environments_set_up = 0

    def setup_environment(self) -> None:
        self.environments_set_up += 1
        super().setup_environment()


class SpawningLauncher(Launcher):
    def __init__(self) -> None:
        self.launched: list[Any] = []

    @property
    def is_interactive_compatible(self) -> bool:
        return True

    @property
    def requires_function(self) -> bool:
        return True

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.launched.append(args)
        return function(*args, **kwargs)


class SpawningStrategy(MultiProcessStrategy):
    def __init__(self) -> None:
        super().__init__()
        self._launcher = SpawningLauncher()


class PlainStrategy(Strategy):
    """Not a single-device strategy, and without a backward-sync control."""

    @property
    def root_device(self) -> torch.device:
        return torch.device("cpu")


class RecordingSyncControl(BackwardSyncControl):
    def __init__(self) -> None:
        self.calls: list[tuple[nn.Module, bool]] = []

    def no_backward_sync(self, module: nn.Module, enabled: bool) -> contextlib.AbstractContextManager[Any]:
        self.calls.append((module, enabled))
        return contextlib.nullcontext()


class SyncStrategy(SingleDeviceStrategy):
    def __init__(self) -> None:
        super().__init__()
        self._backward_sync_control = RecordingSyncControl()


class JointSetupStrategy(SingleDeviceStrategy):
    requires_joint_setup = True


class SplittingStrategy(SingleDeviceStrategy):
    """Pretends to be rank 1 of 2 for the samplers."""

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any]:
        return {"num_replicas": 2, "rank": 1}


def linear_and_sgd() -> tuple[nn.Module, torch.optim.Optimizer]:
    net = nn.Linear(4, 2)
    return net, torch.optim.SGD(net.parameters(), lr=0.1)


# -- construction and properties ------------------------------------------------------------------------


def test_properties_in_one_process() -> None:
    logger = RecordingLogger()
    fabric = make_fabric(loggers=logger)
    assert fabric.device == torch.device("cpu")
    assert (fabric.global_rank, fabric.local_rank, fabric.node_rank, fabric.world_size) == (0, 0, 0, 1)
    assert fabric.is_global_zero
    assert isinstance(fabric.strategy, SingleDeviceStrategy)
    assert fabric.accelerator is fabric.strategy.accelerator
    assert fabric.loggers == [logger]
    assert fabric.logger is logger


def test_logger_without_loggers_is_an_index_error() -> None:
    fabric = make_fabric()
    assert fabric.loggers == []
    with pytest.raises(IndexError):
        _ = fabric.logger


def test_construction_makes_the_strategy_active() -> None:
    from fabric_core.utilities._active import get_active_strategy

    fabric = make_fabric()
    assert get_active_strategy() is fabric.strategy


def test_cli_launch_sets_up_the_environment_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRIC_CORE_CLI_USED", "1")
    monkeypatch.setenv("FABRIC_CORE_LAUNCHER_PID", str(os.getppid()))  # as `fabric-core run` sets it
    strategy = MultiProcessStrategy()
    fabric = make_fabric(strategy=strategy)
    assert strategy.environments_set_up == 1
    fabric.setup(nn.Linear(2, 2))  # launched: allowed
    with pytest.raises(RuntimeError, match=r"launched through the CLI, .* Calling  `.launch\(\)` again is not"):
        fabric.launch()


def test_fabric_pickles() -> None:
    fabric = make_fabric(precision="bf16-mixed")
    clone = pickle.loads(pickle.dumps(fabric))
    assert clone.device == fabric.device
    assert type(clone.strategy.precision) is type(fabric.strategy.precision)


# -- setup ----------------------------------------------------------------------------------------------


def test_setup_returns_module_alone_or_with_optimizers_and_scheduler() -> None:
    fabric = make_fabric()
    assert isinstance(fabric.setup(nn.Linear(2, 2)), FabricModule)
    net, sgd = linear_and_sgd()
    model, optimizer = fabric.setup(net, sgd)
    assert isinstance(model, FabricModule) and isinstance(optimizer, FabricOptimizer)
    net, sgd = linear_and_sgd()
    scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=1)
    result = fabric.setup(net, sgd, scheduler=scheduler)
    assert len(result) == 3
    assert result[2] is scheduler


def test_setup_refuses_objects_set_up_twice() -> None:
    fabric = make_fabric()
    model, optimizer = fabric.setup(*linear_and_sgd())
    with pytest.raises(ValueError, match=r"A model should be passed only once to the `setup` method."):
        fabric.setup(model)
    with pytest.raises(ValueError, match=r"An optimizer should be passed only once to the `setup` method."):
        fabric.setup(nn.Linear(2, 2), optimizer)
    with pytest.raises(ValueError, match=r"A model should be passed only once to the `setup_module` method."):
        fabric.setup_module(model)
    with pytest.raises(ValueError, match=r"An optimizer should be passed only once to the `setup_optimizers` method."):
        fabric.setup_optimizers(optimizer)


def test_setup_module_then_setup_optimizers() -> None:
    fabric = make_fabric()
    model = fabric.setup_module(nn.Linear(2, 2))
    assert isinstance(model, FabricModule)
    first = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    assert isinstance(first, FabricOptimizer)
    pair = fabric.setup_optimizers(*(torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(2)))
    assert isinstance(pair, tuple) and len(pair) == 2


def test_setup_optimizers_errors() -> None:
    with pytest.raises(ValueError, match=r"`setup_optimizers` requires at least one optimizer as input."):
        make_fabric().setup_optimizers()
    with pytest.raises(
        RuntimeError,
        match=r"The `JointSetupStrategy` requires the model and optimizer\(s\) to be set up jointly through "
        r"`.setup\(model, optimizer, ...\)`.",
    ):
        make_fabric(strategy=JointSetupStrategy()).setup_optimizers(linear_and_sgd()[1])
    meta = nn.Linear(2, 2, device="meta")
    with pytest.raises(RuntimeError, match=r"The optimizer has references to the model's meta-device parameters."):
        make_fabric().setup_optimizers(torch.optim.SGD(meta.parameters(), lr=0.1))


def test_setup_moves_and_converts_the_model() -> None:
    model = make_fabric(precision="64-true").setup(nn.Linear(2, 2))
    assert model.weight.dtype == torch.float64
    assert model.weight.device == torch.device("cpu")


def test_setup_warns_about_parameters_on_different_devices() -> None:
    net = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, device="meta"))
    with pytest.warns(PossibleUserWarning, match=r"has 2 parameters on different devices \(for example '1.weight'"):
        with contextlib.suppress(NotImplementedError):  # a meta tensor cannot be copied: the warning came first
            make_fabric().setup(net)


def test_setup_calls_on_after_setup() -> None:
    seen: list[Any] = []

    class Callback:
        def on_after_setup(self, fabric: Fabric, module: nn.Module) -> None:
            seen.append((fabric, module))

    fabric = make_fabric(callbacks=Callback())
    model = fabric.setup(nn.Linear(2, 2))
    assert seen == [(fabric, model)]
    fabric.setup_module(nn.Linear(2, 2))  # as in Lightning, only `setup` calls it
    assert len(seen) == 1


def test_setup_reapplies_torch_compile_around_the_strategy_module() -> None:
    net = nn.Linear(2, 2)
    compiled = torch.compile(net, backend="eager")
    model = make_fabric().setup(compiled)
    assert model.module is net
    assert type(model._forward_module) is type(compiled)
    assert model._forward_module._orig_mod is net


# -- dataloaders ----------------------------------------------------------------------------------------


def dataset(n: int = 8) -> TensorDataset:
    return TensorDataset(torch.arange(float(n)))


@pytest.mark.parametrize(
    ("loaders", "error", "message"),
    [
        ((), ValueError, "`setup_dataloaders` requires at least one dataloader as input."),
        (([1, 2],), TypeError, "Only PyTorch DataLoader are currently supported in `setup_dataloaders`."),
    ],
)
def test_setup_dataloaders_errors(loaders: tuple[Any, ...], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make_fabric().setup_dataloaders(*loaders)


def test_setup_dataloaders_refuses_a_wrapped_loader() -> None:
    fabric = make_fabric()
    wrapped = fabric.setup_dataloaders(DataLoader(dataset()))
    with pytest.raises(ValueError, match=r"A dataloader should be passed only once to the `setup_dataloaders` method."):
        fabric.setup_dataloaders(wrapped)


def test_setup_dataloaders_returns_one_or_a_list() -> None:
    fabric = make_fabric()
    one = fabric.setup_dataloaders(DataLoader(dataset()))
    assert isinstance(one, FabricDataLoader)
    assert one.device == torch.device("cpu")
    two = fabric.setup_dataloaders(DataLoader(dataset()), DataLoader(dataset()), move_to_device=False)
    assert isinstance(two, list) and len(two) == 2
    assert two[0].device is None


def test_setup_dataloaders_keeps_the_sampler_in_one_process() -> None:
    loader = DataLoader(dataset(), shuffle=True)
    wrapped = make_fabric().setup_dataloaders(loader)
    assert wrapped.dataloader is loader


def test_setup_dataloaders_splits_the_data_when_the_strategy_asks() -> None:
    fabric = make_fabric(strategy=SplittingStrategy())
    wrapped = fabric.setup_dataloaders(DataLoader(dataset(8), batch_size=2))
    assert isinstance(wrapped.sampler, DistributedSampler)
    assert not wrapped.sampler.shuffle
    assert [b[0].tolist() for b in wrapped] == [[1.0, 3.0], [5.0, 7.0]]  # rank 1 of 2
    shuffled = fabric.setup_dataloaders(DataLoader(dataset(8), shuffle=True))
    assert shuffled.sampler.shuffle


def test_setup_dataloaders_can_keep_a_custom_sampler() -> None:
    loader = DataLoader(dataset(8), sampler=RandomSampler(dataset(8)))
    wrapped = make_fabric(strategy=SplittingStrategy()).setup_dataloaders(loader, use_distributed_sampler=False)
    assert wrapped.dataloader is loader


def test_setup_dataloaders_seeds_workers_after_seed_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FABRIC_CORE_SEED_WORKERS", raising=False)
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")
    monkeypatch.setenv("PL_SEED_WORKERS", "0")
    assert Fabric.seed_everything(3) == 3  # workers default to True here
    assert os.environ["PL_SEED_WORKERS"] == "1"
    wrapped = make_fabric().setup_dataloaders(DataLoader(dataset()))
    assert wrapped.dataloader.worker_init_fn is not None
    Fabric.seed_everything(3, workers=False)
    assert make_fabric().setup_dataloaders(DataLoader(dataset())).dataloader.worker_init_fn is None


# -- launch and run -------------------------------------------------------------------------------------


def test_launch_runs_the_function_with_the_fabric() -> None:
    strategy = MultiProcessStrategy()
    fabric = make_fabric(strategy=strategy)
    assert fabric.launch(lambda f, x, y=0: (f, x, y), 1, y=2) == (fabric, 1, 2)
    assert strategy.environments_set_up == 1


def test_launch_without_function_is_idempotent() -> None:
    strategy = MultiProcessStrategy()
    fabric = make_fabric(strategy=strategy)
    fabric.launch()
    fabric.launch()
    assert strategy.environments_set_up == 1


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (42, r"`Fabric.launch\(...\)` needs to be a callable, but got 42. HINT: do `.launch\(your_fn\)` instead"),
        (None, r"`Fabric.launch\(...\)` needs to be a callable, but got None. HINT"),
        (lambda: None, r"`Fabric.launch\(function=.*\)` needs to take at least one argument. The launcher will pass"),
    ],
)
def test_launch_validates_the_function(function: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make_fabric().launch(function)


def test_launch_needs_a_function_with_a_spawning_launcher() -> None:
    fabric = make_fabric(strategy=SpawningStrategy())
    with pytest.raises(
        TypeError,
        match=r"To spawn processes with the `SpawningStrategy` strategy, `.launch\(\)` needs to be called with a",
    ):
        fabric.launch()
    assert fabric.launch(lambda f: "done") == "done"
    assert fabric.strategy.launcher.launched == [(fabric,)]


@pytest.mark.parametrize(
    "call",
    [
        lambda f: f.setup(nn.Linear(2, 2)),
        lambda f: f.setup_module(nn.Linear(2, 2)),
        lambda f: f.setup_optimizers(linear_and_sgd()[1]),
        lambda f: f.setup_dataloaders(DataLoader(dataset())),
        lambda f: f.barrier(),
        lambda f: f.broadcast(1),
        lambda f: f.all_gather(1),
        lambda f: f.all_reduce(1),
        lambda f: f.init_module(),
    ],
)
def test_multi_process_strategies_need_launch_first(call: Callable[[Fabric], Any]) -> None:
    fabric = make_fabric(strategy=MultiProcessStrategy())
    with pytest.raises(RuntimeError, match=r"To use Fabric with more than one device, you must call `.launch\(\)`"):
        call(fabric)
    fabric.launch()
    call(fabric)


def test_unguarded_calls_work_before_launch() -> None:
    fabric = make_fabric(strategy=MultiProcessStrategy())
    with fabric.init_tensor():
        assert torch.empty(1).device.type == "cpu"
    assert fabric.to_device(torch.ones(1)).device.type == "cpu"


def test_overridden_run_is_launched() -> None:
    class Trainer(Fabric):
        def run(self, value: int) -> tuple[int, bool]:
            return value * 2, self._launched

    strategy = MultiProcessStrategy()
    trainer = Trainer(accelerator="cpu", strategy=strategy, plugin_manager=make_manager())
    assert trainer.run(21) == (42, True)
    assert strategy.environments_set_up == 1
    trainer.setup(nn.Linear(2, 2))


def test_overridden_run_and_the_cli_do_not_mix(monkeypatch: pytest.MonkeyPatch) -> None:
    class Trainer(Fabric):
        def run(self) -> None:
            pass

    monkeypatch.setenv("FABRIC_CORE_CLI_USED", "1")
    monkeypatch.setenv("FABRIC_CORE_LAUNCHER_PID", str(os.getppid()))  # as `fabric-core run` sets it
    with pytest.raises(TypeError, match=r"Overriding `Fabric.run\(\)` and launching from the CLI is not allowed."):
        Trainer(accelerator="cpu", plugin_manager=make_manager())


# -- the training step ----------------------------------------------------------------------------------


def test_backward_passes_the_forward_module_to_the_strategy() -> None:
    seen: list[Any] = []

    class Recording(SingleDeviceStrategy):
        def backward(self, tensor: torch.Tensor, module: nn.Module | None, *args: Any, **kwargs: Any) -> None:
            seen.append(module)
            super().backward(tensor, module, *args, **kwargs)

    fabric = make_fabric(strategy=Recording())
    model = fabric.setup(nn.Linear(2, 2))
    fabric.backward(model(torch.ones(1, 2)).sum(), model=model)
    fabric.backward(model(torch.ones(1, 2)).sum())
    assert seen == [model._forward_module, None]
    assert model.weight.grad is not None


def test_backward_forwards_arguments() -> None:
    fabric = make_fabric()
    model = fabric.setup(nn.Linear(2, 2))
    loss = model(torch.ones(1, 2)).sum()
    fabric.backward(loss, retain_graph=True)
    fabric.backward(loss)  # possible only because the graph was retained
    torch.testing.assert_close(model.bias.grad, torch.full((2,), 2.0))


def fabric_with_gradients() -> tuple[Fabric, FabricModule, FabricOptimizer, nn.Module]:
    torch.manual_seed(0)
    fabric = make_fabric()
    net = nn.Linear(4, 3)
    reference = nn.Linear(4, 3)
    reference.load_state_dict(net.state_dict())
    model, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    x = torch.randn(5, 4) * 10
    fabric.backward(model(x).pow(2).sum())
    reference(x).pow(2).sum().backward()
    return fabric, model, optimizer, reference


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_gradients_by_norm_matches_torch(norm_type: float) -> None:
    fabric, model, optimizer, reference = fabric_with_gradients()
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=1.0, norm_type=norm_type)
    norm = fabric.clip_gradients(model, optimizer, max_norm=1.0, norm_type=norm_type)
    assert norm is not None
    torch.testing.assert_close(norm, expected)
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)


def test_clip_gradients_by_value() -> None:
    fabric, model, optimizer, reference = fabric_with_gradients()
    assert fabric.clip_gradients(model, optimizer, clip_val=0.5) is None
    torch.nn.utils.clip_grad_value_(reference.parameters(), 0.5)
    assert model.weight.grad.abs().max() <= 0.5
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"clip_val": 1.0, "max_norm": 1.0}, "Only one of `clip_val` or `max_norm` can be set as this specifies"),
        ({}, "You have to specify either `clip_val` or `max_norm` to do gradient clipping!"),
    ],
)
def test_clip_gradients_errors(kwargs: dict[str, float], message: str) -> None:
    fabric, model, optimizer, _ = fabric_with_gradients()
    with pytest.raises(ValueError, match=message):
        fabric.clip_gradients(model, optimizer, **kwargs)


def test_autocast_is_the_precision_forward_context() -> None:
    fabric = make_fabric(precision="bf16-mixed")
    with fabric.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with make_fabric().autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_no_backward_sync_needs_a_set_up_model() -> None:
    with pytest.raises(
        TypeError, match=r"You need to set up the model first before you can call `fabric.no_backward_sync"
    ):
        make_fabric().no_backward_sync(nn.Linear(2, 2))  # type: ignore[arg-type]


def test_no_backward_sync_is_silent_on_one_device() -> None:
    fabric = make_fabric()
    model = fabric.setup(nn.Linear(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fabric.no_backward_sync(model):
            pass


def test_no_backward_sync_warns_where_the_strategy_cannot_skip() -> None:
    fabric = make_fabric(strategy=PlainStrategy())
    model = fabric.setup(nn.Linear(2, 2))
    with pytest.warns(
        PossibleUserWarning,
        match=r"The `PlainStrategy` does not support skipping the gradient synchronization. Remove "
        r"`.no_backward_sync\(\)` from your code or choose a different strategy.",
    ):
        context = fabric.no_backward_sync(model)
    with context:
        pass


def test_no_backward_sync_is_a_no_op_on_one_device_even_with_a_control() -> None:
    # As in Lightning: one device has nothing to synchronise (tests/lightning/test_lightning_launch_behaviour.py has a
    # strategy whose control is used).
    fabric = make_fabric(strategy=SyncStrategy())
    model = fabric.setup(nn.Linear(2, 2))
    with fabric.no_backward_sync(model, enabled=False):
        pass
    assert fabric.strategy.backward_sync_control.calls == []


def test_a_strategy_that_declares_nothing_to_skip_gets_a_silent_no_op() -> None:
    # As Lightning treats its XLA strategy (whose optimizer step reduces the gradients): no control used, no warning.
    class ReducesInItsStep(PlainStrategy):
        backward_sync_is_noop = True

    fabric = make_fabric(strategy=ReducesInItsStep())
    model = fabric.setup(nn.Linear(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fabric.no_backward_sync(model):
            pass
    assert not PlainStrategy.backward_sync_is_noop  # the default: a strategy that cannot skip says so


# -- devices and initialisation -------------------------------------------------------------------------


def test_to_device_moves_modules_in_place_and_collections() -> None:
    fabric = make_fabric()
    net = nn.Linear(2, 2)
    assert fabric.to_device(net) is net
    moved = fabric.to_device({"a": [torch.ones(1)], "b": 3})
    assert moved["a"][0].device.type == "cpu" and moved["b"] == 3


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [
        ("32-true", torch.float32),
        ("64-true", torch.float64),
        ("bf16-true", torch.bfloat16),
        ("bf16-mixed", torch.float32),
    ],
)
def test_init_tensor_and_init_module_use_the_precision_dtype(precision: str, dtype: torch.dtype) -> None:
    fabric = make_fabric(precision=precision)
    with fabric.init_tensor():
        assert torch.empty(1).dtype == dtype
    with fabric.init_module():
        assert nn.Linear(2, 2).weight.dtype == dtype
    assert torch.get_default_dtype() == torch.float32


def test_init_module_empty_init_draws_no_random_numbers() -> None:
    fabric = make_fabric()
    state = torch.random.get_rng_state()
    with fabric.init_module(empty_init=True):
        nn.Linear(64, 64)
    assert torch.equal(state, torch.random.get_rng_state())
    with fabric.init_module(empty_init=False):
        nn.Linear(64, 64)
    assert not torch.equal(state, torch.random.get_rng_state())


def test_sharded_model_is_deprecated_and_does_nothing_without_a_sharding_strategy() -> None:
    fabric = make_fabric(precision="64-true")
    with pytest.warns(DeprecationWarning, match=r"`Fabric.sharded_model\(\)` is deprecated in favor of"):
        context = fabric.sharded_model()
    with context:  # as in Lightning: only a sharding strategy's context; `init_module` applies the precision
        assert nn.Linear(2, 2).weight.dtype == torch.float32


# -- collectives in one process -------------------------------------------------------------------------


def test_print_on_local_rank_zero(capsys: pytest.CaptureFixture[str]) -> None:
    make_fabric().print("hello", 1, sep="-")
    assert capsys.readouterr().out == "hello-1\n"


def test_print_writes_each_line_in_one_call() -> None:
    # Two processes share an unbuffered stdout: the built-in print's separate writes of text and newline let
    # the other process's line land in between (seen in a two-process example run).
    class Recording(io.StringIO):
        calls: list[str] = []

        def write(self, text: str) -> int:
            self.calls.append(text)
            return super().write(text)

    stream = Recording()
    make_fabric().print("step", 3, "loss", 0.5, file=stream, end="|\n", flush=True)
    assert stream.calls == ["step 3 loss 0.5|\n"]
    with pytest.raises(TypeError, match="sep must be None or a string"):
        make_fabric().print("x", sep=1)


def test_collectives_in_one_process() -> None:
    fabric = make_fabric()
    fabric.barrier("here")
    assert fabric.broadcast({"x": [1]}) == {"x": [1]}
    gathered = fabric.all_gather({"n": 3, "t": torch.ones(2, 3)})
    assert torch.equal(gathered["n"], torch.tensor(3))
    assert gathered["t"].shape == (2, 3)  # no world-size dimension with one process
    reduced = fabric.all_reduce([2.5, torch.tensor([1, 2])], reduce_op="sum")
    assert isinstance(reduced, list)
    assert torch.equal(reduced[0], torch.tensor(2.5))
    assert torch.equal(reduced[1], torch.tensor([1, 2]))


def test_rank_zero_first_runs_the_block_in_one_process() -> None:
    ran = []
    with make_fabric().rank_zero_first():
        ran.append(1)
    with make_fabric().rank_zero_first(local=True):
        ran.append(2)
    assert ran == [1, 2]


# -- callbacks and loggers ------------------------------------------------------------------------------


def test_call_passes_only_the_keyword_arguments_each_callback_accepts() -> None:
    received: dict[str, Any] = {}

    class WantsLoss:
        def on_epoch_end(self, loss: float) -> None:
            received["loss"] = loss

    class WantsAll:
        def on_epoch_end(self, *args: Any, **kwargs: Any) -> None:
            received["all"] = (args, kwargs)

    class WantsNothing:
        def on_epoch_end(self) -> None:
            received["nothing"] = True

    class Unrelated:
        pass

    fabric = make_fabric(callbacks=[WantsLoss(), WantsAll(), WantsNothing(), Unrelated()])
    fabric.call("on_epoch_end", loss=0.5, epoch=3)
    assert received == {"loss": 0.5, "all": ((), {"loss": 0.5, "epoch": 3}), "nothing": True}


def test_call_passes_positional_arguments() -> None:
    received = []

    class Callback:
        def hook(self, a: int, b: int = 0) -> None:
            received.append((a, b))

    fabric = make_fabric(callbacks=Callback())
    fabric.call("hook", 1, b=2, c=3)
    assert received == [(1, 2)]


def test_call_skips_a_non_callable_attribute_with_a_warning() -> None:
    class Callback:
        on_epoch_end = "not a method"

    with pytest.warns(UserWarning, match=r"Skipping the callback `Callback.on_epoch_end` because it is not callable."):
        make_fabric(callbacks=[Callback()]).call("on_epoch_end")


def test_log_and_log_dict_send_scalars_to_every_logger() -> None:
    first, second = RecordingLogger(), RecordingLogger()
    fabric = make_fabric(loggers=[first, second])
    fabric.log("loss", torch.tensor(0.5), step=3)
    fabric.log_dict({"a": torch.tensor([2]), "b": 1.5})
    expected = [({"loss": 0.5}, 3), ({"a": 2, "b": 1.5}, None)]
    assert first.records == expected
    assert second.records == expected
    assert all(type(v) in (int, float) for metrics, _ in first.records for v in metrics.values())


def test_log_writes_through_the_csv_logger(tmp_path: Path) -> None:
    from fabric_core.loggers.csv_logs import CSVLogger

    logger = CSVLogger(tmp_path, name="run")
    fabric = make_fabric(loggers=logger)
    fabric.log("loss", torch.tensor(0.25), step=0)
    fabric.log_dict({"loss": torch.tensor(0.125), "acc": 1}, step=1)
    logger.finalize("success")
    lines = (tmp_path / "run" / "version_0" / "metrics.csv").read_text().splitlines()
    assert lines[0].split(",") == ["acc", "loss", "step"]
    assert lines[1:] == [",0.25,0", "1,0.125,1"]


def test_log_refuses_tensors_with_several_elements() -> None:
    fabric = make_fabric(loggers=RecordingLogger())
    with pytest.raises(ValueError, match=r"does not contain a single element, thus it cannot be converted to a scalar"):
        fabric.log("x", torch.ones(2))


@pytest.mark.parametrize(
    "metrics",
    [
        {"loss": torch.tensor(0.5), "step": 3, "name": "a", "none": None, "flag": True, "int": torch.tensor([2])},
        {"outer": {"inner": torch.tensor(1.5)}, "list": [torch.tensor(2.0), 3]},
        {"np": np.float32(0.25), "t": torch.tensor(4, dtype=torch.int64)},
        OrderedDict(a=torch.tensor(1.0)),
        [torch.tensor(1.0), {"b": torch.tensor(2.0)}],
    ],
    ids=["flat", "nested", "numpy-leaf", "ordered-dict", "list"],
)
def test_scalar_conversion_matches_lightning(metrics: Any) -> None:
    lightning_apply = pytest.importorskip("lightning_fabric.utilities.apply_func")
    ours = convert_tensors_to_scalars(metrics)
    theirs = lightning_apply.convert_tensors_to_scalars(metrics)
    assert ours == theirs
    assert type(ours) is type(theirs)
    assert repr(ours) == repr(theirs)  # the same Python types inside (int stays int, a bool stays a bool)


def test_seed_everything_seeds_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    seed_vars = ("FABRIC_CORE_GLOBAL_SEED", "PL_GLOBAL_SEED", "FABRIC_CORE_SEED_WORKERS", "PL_SEED_WORKERS")
    for name in seed_vars:
        monkeypatch.setenv(name, "0")
    Fabric.seed_everything(7)
    first = torch.rand(3)
    Fabric.seed_everything(7)
    assert torch.equal(first, torch.rand(3))


def test_the_models_set_up_are_counted_as_lightning_counts_them() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.nn.Linear(1, 2)
    assert fabric._models_setup == 0
    fabric.setup(model, torch.optim.Adam(model.parameters()))
    fabric.setup_module(model)
    assert fabric._models_setup == 2
