"""The wrappers ``fabric.setup*`` returns: FabricModule, FabricOptimizer, FabricDataLoader."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from fabric_core import is_wrapped
from fabric_core.errors import FabricCoreWarning
from fabric_core.fabric import Fabric
from fabric_core.precision.precision import Precision
from fabric_core.strategies.single_device import SingleDeviceStrategy
from fabric_core.testing import make_manager
from fabric_core.wrappers import (
    FabricDataLoader,
    FabricModule,
    FabricOptimizer,
    _FabricModule,
    unwrap_objects,
)


def make_fabric(**kwargs: Any) -> Fabric:
    kwargs.setdefault("accelerator", "cpu")
    return Fabric(plugin_manager=make_manager(), **kwargs)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x) * self.scale

    def generate(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x) + 1

    def describe(self) -> str:
        return "net"

    def training_step(self, x: torch.Tensor) -> torch.Tensor:
        return self(x).sum()


class Envelope(nn.Module):
    """Stands in for DDP: the strategy's module wraps the user's and counts the calls it sees."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.calls = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.module(*args, **kwargs)


class EnvelopingStrategy(SingleDeviceStrategy):
    def setup_module(self, module: nn.Module) -> nn.Module:
        return Envelope(module)


# -- FabricModule ---------------------------------------------------------------------------------------


def test_module_forward_matches_the_original_and_keeps_clean_state_dict_keys() -> None:
    net = Net()
    model = make_fabric().setup(net)
    x = torch.randn(3, 4)
    assert isinstance(model, FabricModule)
    assert _FabricModule is FabricModule
    assert model.module is net
    torch.testing.assert_close(model(x), net(x))
    assert list(model.state_dict()) == ["layer.weight", "layer.bias"]


def test_module_load_state_dict_goes_to_the_original() -> None:
    net = Net()
    model = make_fabric().setup(net)
    state = {k: torch.zeros_like(v) for k, v in net.state_dict().items()}
    model.load_state_dict(state)
    assert torch.count_nonzero(net.layer.weight) == 0
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict({})


def test_module_attributes_and_methods_come_from_the_original() -> None:
    net = Net()
    model = make_fabric().setup(net)
    assert model.layer is net.layer
    assert model.scale == 1.0
    assert model.describe() == "net"
    with pytest.raises(AttributeError, match="missing"):
        _ = model.missing


def test_module_setattr_reaches_the_original() -> None:
    net = Net()
    model = make_fabric().setup(net)
    model.scale = 3.0  # an attribute of the original
    assert net.scale == 3.0
    model.new_attribute = "x"  # an attribute of neither
    assert net.new_attribute == "x"
    assert "new_attribute" not in model.__dict__
    model.eval()  # `training` exists on both: both change
    assert not model.training and not net.training and not net.layer.training


def test_module_device_and_dtype() -> None:
    model = make_fabric(precision="64-true").setup(Net())
    assert model.device == torch.device("cpu")
    assert model.dtype == torch.float64


def test_module_deepcopy_copies_the_wrapped_module() -> None:
    model = make_fabric().setup(Net())
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.layer.weight.zero_()
    assert torch.count_nonzero(model.layer.weight) > 0
    assert torch.count_nonzero(twin(torch.ones(1, 4)) - twin.layer.bias) == 0


@pytest.mark.parametrize(
    ("precision", "param_dtype", "compute_dtype"),
    [
        ("32-true", torch.float32, torch.float32),
        ("64-true", torch.float64, torch.float64),
        ("16-true", torch.float16, torch.float16),
        ("bf16-true", torch.bfloat16, torch.bfloat16),
        ("bf16-mixed", torch.float32, torch.bfloat16),
    ],
)
def test_module_dtypes_for_every_precision(
    precision: str, param_dtype: torch.dtype, compute_dtype: torch.dtype
) -> None:
    seen: dict[str, torch.dtype] = {}

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor, index: torch.Tensor) -> dict[str, torch.Tensor]:
            seen["input"] = x.dtype
            seen["index"] = index.dtype
            out = self.layer(x)
            seen["compute"] = out.dtype
            return {"out": out, "index": index}

    model = make_fabric(precision=precision).setup(Probe())
    result = model(torch.randn(3, 4), index=torch.arange(3))
    assert model.layer.weight.dtype == param_dtype
    assert seen["compute"] == compute_dtype
    assert seen["index"] == torch.int64  # integer inputs are never converted
    assert result["out"].dtype == torch.float32  # outputs leave in the default dtype
    if precision != "32-true":
        assert seen["input"] == compute_dtype


def test_module_16_mixed_on_cpu_falls_back_to_bf16() -> None:
    with pytest.warns(FabricCoreWarning, match="bf16-mixed"):
        fabric = make_fabric(precision="16-mixed")
    seen: list[torch.dtype] = []
    model = fabric.setup(nn.Linear(4, 2))
    model.module.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    assert model(torch.randn(2, 4)).dtype == torch.float32
    assert seen == [torch.bfloat16]


def test_raw_backward_is_refused_when_the_precision_changes_backward() -> None:
    fabric = make_fabric(precision="bf16-mixed")
    model = fabric.setup(nn.Linear(4, 2))
    loss = model(torch.randn(2, 4)).sum()
    with pytest.raises(RuntimeError, match=r"requires you to call `fabric.backward\(loss\)` instead of"):
        loss.backward()
    fabric.backward(model(torch.randn(2, 4)).sum())
    assert model.weight.grad is not None


def test_raw_backward_is_fine_with_full_precision() -> None:
    model = make_fabric().setup(nn.Linear(4, 2))
    output = model(torch.randn(2, 4))
    assert output._backward_hooks is None  # nothing hooked where backward is plain
    output.sum().backward()
    assert model.weight.grad is not None


def test_mark_forward_method_validates_its_argument() -> None:
    model = make_fabric().setup(Net())
    with pytest.raises(TypeError, match="Expected a method or a string, but got: int"):
        model.mark_forward_method(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"You cannot mark the forward method itself as a forward method."):
        model.mark_forward_method("forward")
    with pytest.raises(AttributeError, match=r"`Net.nope` does not exist or is not a method."):
        model.mark_forward_method("nope")
    with pytest.raises(AttributeError, match=r"`Net.scale` does not exist or is not a method."):
        model.mark_forward_method("scale")
    model.mark_forward_method(model.module.generate)
    model.mark_forward_method("describe")


def test_unmarked_method_that_runs_submodules_is_refused_when_the_strategy_wraps() -> None:
    model = make_fabric(strategy=EnvelopingStrategy()).setup(Net())
    assert isinstance(model._forward_module, Envelope)
    with pytest.raises(
        RuntimeError,
        match=r"You are calling the method `Net.generate\(\)` from outside the model. .*"
        r"`fabric_model.mark_forward_method\('generate'\)` after `fabric.setup\(\)`.",
    ):
        model.generate(torch.randn(2, 4))
    assert model.describe() == "net"  # runs no submodule: allowed
    assert not model.module.layer._forward_hooks  # the tracking hooks are gone


def test_marked_method_goes_through_the_strategy_forward() -> None:
    net = Net()
    model = make_fabric(strategy=EnvelopingStrategy()).setup(net)
    model.mark_forward_method("generate")
    x = torch.randn(2, 4)
    torch.testing.assert_close(model.generate(x), net.layer(x) + 1)
    assert model._forward_module.calls == 1
    assert "forward" not in net.__dict__  # the temporary swap is undone
    torch.testing.assert_close(model(x), net.layer(x))


def test_step_methods_are_premarked() -> None:
    net = Net()
    model = make_fabric(strategy=EnvelopingStrategy()).setup(net)
    model.training_step(torch.randn(2, 4))
    assert model._forward_module.calls == 1


# -- FabricOptimizer ------------------------------------------------------------------------------------


def test_optimizer_is_an_instance_of_the_original_class() -> None:
    net = nn.Linear(4, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    _, optimizer = make_fabric().setup(net, sgd)
    assert isinstance(optimizer, FabricOptimizer)
    assert isinstance(optimizer, torch.optim.SGD)
    assert type(optimizer).__name__ == "FabricSGD"
    assert optimizer.optimizer is sgd
    assert optimizer.param_groups is sgd.param_groups
    assert optimizer.defaults is sgd.defaults


def test_optimizer_step_updates_and_zero_grad_clears() -> None:
    net = nn.Linear(4, 2)
    model, optimizer = make_fabric().setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    before = net.weight.detach().clone()
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    assert not torch.equal(before, net.weight)
    optimizer.zero_grad()
    assert net.weight.grad is None


def test_lr_scheduler_accepts_the_wrapper_and_drives_the_original() -> None:
    net = nn.Linear(4, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=1.0)
    _, optimizer = make_fabric().setup(net, sgd)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "scheduler.step() before optimizer.step()" warning
        optimizer.step()
        scheduler.step()
    assert sgd.param_groups[0]["lr"] == 0.5


def test_optimizer_load_state_dict_keeps_wrapper_and_original_in_sync() -> None:
    net = nn.Linear(4, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=1.0, momentum=0.9)
    _, optimizer = make_fabric().setup(net, sgd)
    state = copy.deepcopy(optimizer.state_dict())
    state["param_groups"][0]["lr"] = 0.25
    optimizer.load_state_dict(state)
    assert sgd.param_groups[0]["lr"] == 0.25
    assert optimizer.param_groups[0]["lr"] == 0.25
    assert optimizer.param_groups is sgd.param_groups


def test_optimizer_state_dict_comes_from_the_strategy() -> None:
    class Recording(SingleDeviceStrategy):
        def get_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
            return {"from": "strategy"}

    net = nn.Linear(4, 2)
    _, optimizer = make_fabric(strategy=Recording()).setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    assert optimizer.state_dict() == {"from": "strategy"}


def test_optimizer_step_goes_through_the_strategy_and_tells_callbacks() -> None:
    steps: list[str] = []

    class Counting(SingleDeviceStrategy):
        def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> Any:
            steps.append("strategy")
            return super().optimizer_step(optimizer, **kwargs)

    class OnlyOptimizer:
        def on_after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
            steps.append(f"callback:{type(optimizer).__name__}")

    class Everything:
        def on_after_optimizer_step(self, **kwargs: Any) -> None:
            steps.append("kwargs:" + ",".join(sorted(kwargs)))

    net = nn.Linear(4, 2)
    fabric = make_fabric(strategy=Counting(), callbacks=[OnlyOptimizer(), Everything()])
    _, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    optimizer.step()
    assert steps == ["strategy", "callback:SGD", "kwargs:optimizer,strategy"]


@pytest.mark.parametrize("package", ["lightning_fabric", "fabric_core"])
def test_a_strategy_whose_model_is_an_optimizer_steps_that_one(package: str) -> None:
    """Lightning's contract: ``step()`` hands the strategy its ``model`` when that is itself an optimizer."""
    import importlib

    pytest.importorskip(package)
    strategies = importlib.import_module(f"{package}.strategies")
    wrappers = importlib.import_module(f"{package}.wrappers")

    class Holding(strategies.SingleDeviceStrategy):
        model: Any = None

    weight, main = nn.Parameter(torch.ones(1)), nn.Parameter(torch.ones(1))
    weight.grad, main.grad = torch.ones(1), torch.ones(1)
    optimizer = torch.optim.SGD([weight], lr=1.0)
    strategy = Holding(device=torch.device("cpu"))
    strategy.model = torch.optim.SGD([main], lr=1.0)
    wrappers._FabricOptimizer(optimizer=optimizer, strategy=strategy).step()
    assert (main.item(), weight.item()) == (0.0, 1.0)
    strategy.model = nn.Linear(1, 1)  # a model that is no optimizer: the wrapped optimizer steps
    wrappers._FabricOptimizer(optimizer=optimizer, strategy=strategy).step()
    assert (main.item(), weight.item()) == (0.0, 0.0)


def test_optimizer_attributes_fall_through_to_the_original() -> None:
    net = nn.Linear(4, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    _, optimizer = make_fabric().setup(net, sgd)
    sgd.added_later = 7  # type: ignore[attr-defined]
    assert optimizer.added_later == 7


# -- FabricDataLoader -----------------------------------------------------------------------------------


class EpochRecordingSampler(Sampler[int]):
    def __init__(self, size: int) -> None:
        self.size = size
        self.epochs: list[int] = []

    def __iter__(self) -> Any:
        return iter(range(self.size))

    def __len__(self) -> int:
        return self.size

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_dataloader_length_and_device() -> None:
    loader = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4)
    wrapped = FabricDataLoader(loader, device=torch.device("meta"))
    assert len(wrapped) == 3
    assert wrapped.device == torch.device("meta")
    batches = list(wrapped)
    assert all(batch[0].device.type == "meta" for batch in batches)
    assert [batch[0].shape[0] for batch in batches] == [4, 4, 2]


def test_dataloader_without_device_leaves_batches_alone() -> None:
    loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2)
    wrapped = FabricDataLoader(loader)
    assert wrapped.device is None
    assert [b[0].tolist() for b in wrapped] == [[0.0, 1.0], [2.0, 3.0]]


def test_dataloader_sets_the_epoch_once_per_sampler_object() -> None:
    sampler = EpochRecordingSampler(4)
    loader = DataLoader(TensorDataset(torch.arange(4.0)), sampler=sampler, batch_size=2)
    assert loader.batch_sampler.sampler is sampler  # the same object twice: called once
    wrapped = FabricDataLoader(loader)
    for _ in range(3):
        list(wrapped)
    assert sampler.epochs == [0, 1, 2]


def test_dataloader_sets_the_epoch_on_a_custom_batch_samplers_sampler() -> None:
    inner = EpochRecordingSampler(4)
    batch_sampler = torch.utils.data.BatchSampler(inner, batch_size=2, drop_last=False)
    loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_sampler=batch_sampler)
    wrapped = make_fabric().setup_dataloaders(loader)
    list(wrapped)
    list(wrapped)
    assert inner.epochs == [0, 1]


def test_dataloader_keeps_the_loaders_attributes() -> None:
    loader = DataLoader(TensorDataset(torch.arange(4.0)), batch_size=2, num_workers=0)
    wrapped = FabricDataLoader(loader)
    assert wrapped.batch_size == 2
    assert wrapped.dataset is loader.dataset
    assert wrapped.dataloader is loader


# -- helpers --------------------------------------------------------------------------------------------


def test_is_wrapped_and_unwrap_objects() -> None:
    net = nn.Linear(4, 2)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.arange(4.0)))
    fabric = make_fabric()
    model, optimizer = fabric.setup(net, sgd)
    wrapped_loader = fabric.setup_dataloaders(loader)
    for obj in (model, optimizer, wrapped_loader):
        assert is_wrapped(obj)
    for obj in (net, sgd, loader, 1, None):
        assert not is_wrapped(obj)
    unwrapped = unwrap_objects({"m": model, "o": [optimizer], "d": (wrapped_loader,), "x": 3})
    assert unwrapped["m"] is net
    assert unwrapped["o"][0] is sgd
    assert unwrapped["d"][0] is loader
    assert unwrapped["x"] == 3


def test_is_wrapped_sees_through_torch_compile() -> None:
    model = make_fabric().setup(nn.Linear(4, 2))
    compiled = torch.compile(model)
    assert is_wrapped(compiled)
    assert unwrap_objects(compiled) is model.module


def test_plain_bf16_backward_stays_guarded_after_fabric_backward_ran() -> None:
    # Lightning's rule: the precision overrides a backward hook, so a raw backward is refused on every step,
    # also after the loop has called fabric.backward (Lightning's test_backward_required).
    fabric = make_fabric(precision="bf16-mixed")
    model = fabric.setup(nn.Linear(4, 2))
    x = torch.randn(2, 4)
    fabric.backward(model(x).sum())
    for output in (model(x), model(x, **{}), model(model.module.weight.new_ones(2, 4))):
        assert output._backward_hooks is not None
        with pytest.raises(RuntimeError, match=r"requires you to call `fabric.backward\(loss\)`"):
            output.sum().backward()
    chained = fabric.setup(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match=r"requires you to call `fabric.backward\(loss\)`"):
        chained(model(x)).sum().backward()
    fabric.backward(chained(model(x)).sum())  # and fabric.backward of the same still runs


def test_a_guarded_backward_that_fails_leaves_the_guard_armed() -> None:
    fabric = make_fabric(precision="bf16-mixed")
    model = fabric.setup(nn.Linear(4, 2))
    loss = model(torch.randn(2, 4)).sum()
    fabric.backward(loss)
    with pytest.raises(RuntimeError):
        fabric.backward(loss)  # the graph is freed: backward fails inside fabric.backward
    with pytest.raises(RuntimeError, match=r"requires you to call `fabric.backward\(loss\)`"):
        model(torch.randn(2, 4)).sum().backward()


def test_scaled_backward_stays_guarded_after_fabric_backward() -> None:
    from fabric_core.precision.mixed import MixedPrecision

    fabric = make_fabric(plugins=MixedPrecision("16-mixed", device="cpu"))
    model = fabric.setup(nn.Linear(4, 2))
    fabric.backward(model(torch.randn(2, 4)).sum())
    loss = model(torch.randn(2, 4)).sum()
    with pytest.raises(RuntimeError, match=r"requires you to call `fabric.backward\(loss\)`"):
        loss.backward()  # it would skip the loss scaling the optimizer step undoes


def test_strategies_that_gather_collections_receive_the_whole_dict() -> None:
    calls: list[Any] = []

    class Recording(SingleDeviceStrategy):
        gathers_collections = True

        def all_gather(self, tensor: Any, group: Any = None, sync_grads: bool = False) -> Any:
            calls.append(tensor)
            return tensor

    fabric = make_fabric(strategy=Recording())
    data = {"a": torch.ones(2), "b": [torch.zeros(1), 3]}
    out = fabric.all_gather(data)
    assert len(calls) == 1 and set(calls[0]) == {"a", "b"}
    assert isinstance(out["b"][1], torch.Tensor)  # numbers become tensors before the strategy sees them
    calls.clear()
    fabric.all_gather(torch.ones(3))
    assert len(calls) == 1


def test_strategies_that_do_not_gather_collections_are_called_per_tensor() -> None:
    calls: list[Any] = []

    class PerTensor(SingleDeviceStrategy):
        def all_gather(self, tensor: Any, group: Any = None, sync_grads: bool = False) -> Any:
            calls.append(tensor)
            return tensor

    make_fabric(strategy=PerTensor()).all_gather({"a": torch.ones(2), "b": [torch.zeros(1), 3]})
    assert len(calls) == 3 and all(isinstance(c, torch.Tensor) for c in calls)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_hooks_on_the_wrapper_run_and_may_change_the_output(precision: str) -> None:
    # The wrapper skips `Module.__call__` only while it has no hooks: a hook added later must still run.
    model = make_fabric(precision=precision).setup(nn.Linear(4, 2))
    x = torch.randn(3, 4)
    assert model(x).dtype == torch.float32
    seen: list[str] = []
    model.register_forward_pre_hook(lambda m, args: seen.append("pre"))
    handle = model.register_forward_hook(lambda m, args, out: out * 0)
    out = model(x)
    assert seen == ["pre"]
    assert torch.equal(out, torch.zeros(3, 2))
    handle.remove()
    assert model(x).abs().sum() > 0


def test_global_module_hooks_see_the_wrapper_and_the_module() -> None:
    model = make_fabric().setup(nn.Linear(4, 2))
    seen: list[str] = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append(type(m).__name__))
    try:
        model(torch.randn(1, 4))
    finally:
        handle.remove()
    assert seen == ["Linear", "_FabricModule"]  # Lightning's class name


def test_backward_hooks_on_the_wrapper_run() -> None:
    model = make_fabric().setup(nn.Linear(4, 2))
    grads: list[torch.Size] = []
    model.register_full_backward_hook(lambda m, grad_in, grad_out: grads.append(grad_out[0].shape))
    model(torch.randn(3, 4, requires_grad=True)).sum().backward()
    assert grads == [torch.Size([3, 2])]


def test_compiling_the_wrapper_compiles_the_wrapper_only() -> None:
    fabric = make_fabric(precision="bf16-mixed")
    model = fabric.setup(nn.Linear(4, 2))
    model.compile(backend="eager")
    assert "_compiled_call_impl" not in vars(model.module)
    assert model(torch.randn(2, 4)).dtype == torch.float32  # through the compiled wrapper: converted
    assert model.module(torch.randn(2, 4)).dtype == torch.float32  # the plain module: no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.module(torch.randn(2, 4)).dtype == torch.bfloat16


def test_a_copied_wrapper_with_hooks_still_runs_them() -> None:
    model = make_fabric().setup(nn.Linear(4, 2))
    model.register_forward_hook(lambda m, args, out: out * 0)
    copied = copy.deepcopy(model)
    assert torch.equal(copied(torch.randn(3, 4)), torch.zeros(3, 2))


class _ScalingPrecision(Precision):
    """A backward that is not plain: a raw backward would skip it, so it stays refused."""

    def backward(self, tensor: torch.Tensor, model: nn.Module | None, *args: Any, **kwargs: Any) -> None:
        (tensor * 2).backward(*args, **kwargs)


def test_a_backward_that_differs_stays_refused_after_fabric_backward_ran() -> None:
    fabric = Fabric(accelerator="cpu", plugins=[_ScalingPrecision()], plugin_manager=make_manager())
    model = fabric.setup(nn.Linear(4, 2))
    x = torch.ones(1, 4)
    fabric.backward(model(x).sum())
    assert torch.equal(model.weight.grad, torch.full((2, 4), 2.0))  # the precision's backward ran
    with pytest.raises(RuntimeError, match=r"requires you to call `fabric\.backward"):
        model(x).sum().backward()


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("kind", ["forward", "forward_pre", "full_backward", "full_backward_pre"])
def test_hooks_added_to_the_original_after_setup_run(precision: str, kind: str) -> None:
    # The wrapper calls the strategy module's `forward` directly only while that module has no hooks.
    original = nn.Linear(4, 2)
    fabric = make_fabric(precision=precision)
    model = fabric.setup(original)
    x = torch.randn(3, 4, requires_grad=True)
    fabric.backward(model(x).sum())
    assert model(x).abs().sum() > 0  # from here on, the wrapper's direct call
    seen: list[str] = []

    def hook(*args: Any) -> Any:
        seen.append(kind)
        return args[-1] * 0 if kind == "forward" else None

    handle = getattr(original, f"register_{kind}_hook")(hook)
    out = model(x)
    fabric.backward(out.sum())
    assert seen == [kind]
    assert torch.equal(out, torch.zeros(3, 2)) == (kind == "forward")
    handle.remove()
    model(x)
    assert seen == [kind]


def test_compiling_the_original_after_setup_takes_effect() -> None:
    compiled_graphs: list[int] = []

    def backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        compiled_graphs.append(len(graph.graph.nodes))
        return graph.forward

    original = Net()
    model = make_fabric().setup(original)
    x = torch.randn(3, 4)
    expected = model(x)
    original.compile(backend=backend)
    assert torch.allclose(model(x), expected)
    assert len(compiled_graphs) == 1


def test_a_copied_wrapper_sees_its_own_modules_compilation() -> None:
    compiled_graphs: list[int] = []

    def backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        compiled_graphs.append(len(graph.graph.nodes))
        return graph.forward

    model = make_fabric().setup(Net())
    x = torch.randn(3, 4)
    model(x)
    twin = copy.deepcopy(model)
    twin.module.compile(backend=backend)
    assert torch.allclose(twin(x), model(x))
    assert len(compiled_graphs) == 1


def test_a_forward_replaced_on_the_instance_and_a_custom_call_are_honoured() -> None:
    class LoudLinear(nn.Linear):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return super().__call__(*args, **kwargs) + 100

    model = make_fabric().setup(LoudLinear(4, 2))
    x = torch.randn(3, 4)
    assert torch.allclose(model(x), model.module.forward(x) + 100)

    replaced = make_fabric().setup(nn.Linear(4, 2))
    replaced.module.forward = lambda x: torch.full((len(x), 2), 7.0)  # type: ignore[method-assign]
    assert torch.equal(replaced(x), torch.full((3, 2), 7.0))


def test_tracing_a_model_that_calls_the_wrapper() -> None:
    # Under tracing the wrapper calls the strategy's module through `Module.__call__`, which records scopes.
    model = make_fabric(precision="bf16-mixed").setup(nn.Linear(4, 2))
    outer = nn.Sequential(model)
    x = torch.randn(3, 4)
    traced = torch.jit.trace(outer, x, check_trace=False)
    assert "scope: __module.0._forward_module" in str(traced.inlined_graph)
    assert torch.allclose(traced(x), model(x))


def test_zero_grad_is_the_original_optimizers_own_method() -> None:
    # No `FabricOptimizer.zero_grad` to drift from the original's: the instance answers with the original's
    # bound method, so `set_to_none` and any override of the optimizer class behave as without the wrapper.
    assert "zero_grad" not in FabricOptimizer.__dict__
    fabric = make_fabric()
    net = Net()
    model, optimizer = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    assert optimizer.zero_grad.__self__ is optimizer.optimizer
    fabric.backward(model(torch.randn(2, 4)).sum())
    optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_wrappers_work_with_a_strategy_and_precision_that_only_answer_per_instance() -> None:
    # Lightning's own tests build the wrappers around `Mock()` strategies: a class that has none of the hooks, an
    # instance that answers every one. Such hooks count as the strategy's own and are called, never looked up.
    from unittest.mock import MagicMock, Mock

    module = nn.Linear(2, 2)
    strategy = MagicMock()
    strategy.precision.convert_input.side_effect = lambda data: data
    strategy.precision.convert_output.side_effect = lambda data: data
    wrapped = FabricModule(module, strategy)
    x = torch.ones(1, 2)
    assert torch.equal(wrapped(x), module(x)) and wrapped.module is module
    strategy.precision.convert_input.assert_called_once()
    strategy.precision.forward_context.assert_called_once()

    optimizer = Mock(spec=torch.optim.SGD)  # presents itself as an SGD
    stepping = Mock(spec=["optimizer_step"])  # a strategy with `optimizer_step` and nothing else
    stepping.optimizer_step.return_value = 123
    fabric_optimizer = FabricOptimizer(optimizer, stepping)
    assert type(fabric_optimizer).__name__ == "FabricSGD" and isinstance(fabric_optimizer, torch.optim.SGD)
    assert fabric_optimizer.step() == 123
    stepping.optimizer_step.assert_called_once_with(optimizer)
