"""fabric_core.utilities.operations in a single process: collectives are the identity, helpers walk batches."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import pickle
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import pytest
import torch
from torch import Tensor

from fabric_core.errors import InvalidConfigError
from fabric_core.strategies.single_device import SingleDeviceStrategy
from fabric_core.utilities._active import get_active_strategy, set_active_strategy
from fabric_core.utilities.operations import (
    GatheredParameters,
    TensorInformation,
    broadcast,
    broadcast_object_list,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    find_batch_size,
    find_device,
    gather,
    gather_object,
    get_data_structure,
    honor_type,
    ignorant_find_batch_size,
    initialize_tensors,
    is_tensor_information,
    is_torch_tensor,
    pad_across_processes,
    reduce,
    send_to_device,
    slice_tensors,
    synchronize_rng_state,
    synchronize_rng_states,
    wait_for_everyone,
)

META = torch.device("meta")


class Pair(NamedTuple):
    x: Any
    y: Any


# -- collectives in one process --------------------------------------------------------------------------
def test_gather_returns_the_tensor() -> None:
    t = torch.arange(6).reshape(3, 2)
    assert gather(t) is t


def test_gather_makes_scalars_one_dimensional() -> None:
    assert gather(torch.tensor(5.0)).shape == (1,)


def test_gather_walks_nested_structures() -> None:
    out = gather({"a": torch.tensor(1), "b": [torch.ones(2, 2)]})
    assert out["a"].shape == (1,)
    assert out["b"][0].shape == (2, 2)


def test_gather_with_dst_zero_returns_the_tensor() -> None:
    t = torch.ones(2)
    assert gather(t, dst=0) is t


def test_gather_rejects_a_dst_outside_the_world() -> None:
    with pytest.raises(
        InvalidConfigError, match=r"`gather\(dst=1\)` is not a rank of this run: valid ranks are 0 to 0"
    ):
        gather(torch.ones(2), dst=1)


@pytest.mark.parametrize("operation", [gather, broadcast, reduce, pad_across_processes])
def test_collectives_reject_non_tensor_leaves(operation: Any) -> None:
    with pytest.raises(TypeError, match=rf"Unsupported type str passed to `{operation.__name__}`"):
        operation({"a": torch.ones(1), "b": "text"})


def test_reduce_returns_a_clone() -> None:
    t = torch.tensor([1.0, 2.0])
    out = reduce(t, "sum")
    assert out is not t
    out += 1
    assert t.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("reduction", ["mean", "sum", "max", "min", "product", "none", "MEAN"])
def test_reduce_in_one_process_keeps_the_values(reduction: str) -> None:
    assert reduce(torch.tensor([1.0, 3.0]), reduction).tolist() == [1.0, 3.0]


def test_reduce_mean_of_integers_is_floating_point() -> None:
    out = reduce(torch.tensor([1, 3]), "mean")
    assert out.dtype == torch.get_default_dtype()
    assert out.tolist() == [1.0, 3.0]


def test_reduce_sum_keeps_integers() -> None:
    assert reduce(torch.tensor([1, 3]), "sum").dtype == torch.int64


def test_reduce_scales_the_result() -> None:
    assert reduce(torch.tensor([1.0, 3.0]), "sum", scale=0.5).tolist() == [0.5, 1.5]


def test_reduce_walks_nested_structures() -> None:
    out = reduce(Pair(torch.ones(1), [torch.zeros(1)]))
    assert isinstance(out, Pair)
    assert out.y[0].tolist() == [0.0]


def test_reduce_rejects_unknown_reductions() -> None:
    with pytest.raises(InvalidConfigError, match=r"reduction='avg'.*Valid choices: mean, sum, none, max, min, product"):
        reduce(torch.ones(1), "avg")


def test_pad_across_processes_in_one_process_returns_the_tensor() -> None:
    t = torch.ones(2, 3)
    assert pad_across_processes(t, dim=1) is t


def test_broadcast_returns_the_same_tensors() -> None:
    t = torch.ones(2)
    assert broadcast(t) is t
    assert broadcast({"t": t})["t"] is t


def test_broadcast_rejects_a_source_outside_the_world() -> None:
    with pytest.raises(InvalidConfigError, match=r"`broadcast\(from_process=2\)`"):
        broadcast(torch.ones(1), from_process=2)


def test_broadcast_object_list_returns_the_list() -> None:
    objects = [1, {"a": 2}]
    assert broadcast_object_list(objects) is objects
    assert objects == [1, {"a": 2}]


@pytest.mark.parametrize(("obj", "expected"), [([1, 2], [1, 2]), ((1, 2), [1, 2]), ({"a": 1}, [{"a": 1}]), (3, [3])])
def test_gather_object_in_one_process(obj: Any, expected: list[Any]) -> None:
    assert gather_object(obj) == expected


def test_wait_for_everyone_in_one_process_returns() -> None:
    wait_for_everyone()


def test_synchronize_rng_states_in_one_process_keeps_the_state() -> None:
    torch.manual_seed(0)
    state = torch.get_rng_state()
    generator = torch.Generator().manual_seed(1)
    synchronize_rng_states(["torch", "generator"], generator=generator)
    assert torch.equal(torch.get_rng_state(), state)


def test_synchronize_rng_state_rejects_unknown_types() -> None:
    with pytest.raises(InvalidConfigError, match=r"rng_type='numpy'.*Valid choices: torch, cuda, mps, xpu, generator"):
        synchronize_rng_state("numpy")


def test_synchronize_rng_state_accepts_enum_values() -> None:
    class RNGType:
        value = "torch"

    synchronize_rng_state(RNGType())


def test_synchronize_rng_state_needs_the_generator() -> None:
    with pytest.raises(InvalidConfigError, match="pass `generator=`"):
        synchronize_rng_states(["generator"])


# -- honor_type, tensor checks ---------------------------------------------------------------------------
def test_honor_type_rebuilds_lists_tuples_and_namedtuples() -> None:
    assert honor_type([0], (i for i in range(2))) == [0, 1]
    one: tuple[int, ...] = (0,)
    assert honor_type(one, (i for i in range(2))) == (0, 1)
    assert honor_type(Pair(0, 0), (i for i in range(2))) == Pair(0, 1)


def test_is_torch_tensor() -> None:
    assert is_torch_tensor(torch.ones(1))
    assert not is_torch_tensor([1.0])


def test_tensor_information_is_frozen() -> None:
    info = TensorInformation(shape=torch.Size([2]), dtype=torch.float32)
    assert is_tensor_information(info)
    assert not is_tensor_information(torch.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.dtype = torch.int64  # type: ignore[misc]


def test_data_structure_round_trip() -> None:
    batch = {"x": torch.ones(2, 3, dtype=torch.float16), "y": [torch.zeros(4, dtype=torch.int64)]}
    structure = get_data_structure(batch)
    assert structure == {
        "x": TensorInformation(torch.Size([2, 3]), torch.float16),
        "y": [TensorInformation(torch.Size([4]), torch.int64)],
    }
    empty = initialize_tensors(structure)
    assert (empty["x"].shape, empty["x"].dtype) == ((2, 3), torch.float16)
    assert (empty["y"][0].shape, empty["y"][0].dtype) == ((4,), torch.int64)


def test_get_data_structure_rejects_non_tensors() -> None:
    with pytest.raises(TypeError, match="Unsupported type int passed to `get_data_structure`"):
        get_data_structure([1])


# -- batch size and device -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "batch",
    [
        torch.ones(4, 2),
        [torch.ones(4), torch.ones(1)],
        (torch.ones(4),),
        {"x": torch.ones(4), "y": torch.ones(2)},
        [{"x": [torch.ones(4)]}],
    ],
)
def test_find_batch_size(batch: Any) -> None:
    assert find_batch_size(batch) == 4
    assert ignorant_find_batch_size(batch) == 4


@pytest.mark.parametrize(
    ("batch", "error"),
    [([], ValueError), ({}, ValueError), (torch.tensor(1.0), ValueError), (["a"], TypeError), (3, TypeError)],
)
def test_find_batch_size_errors(batch: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        find_batch_size(batch)
    assert ignorant_find_batch_size(batch) is None


def test_find_device_finds_the_first_tensor_depth_first() -> None:
    batch = {"labels": ["a", None], "x": [torch.ones(1, device=META)], "y": torch.ones(1)}
    assert find_device(batch) == META


def test_find_device_without_tensors() -> None:
    assert find_device({"a": [1, "b"]}) is None
    assert find_device(3) is None


# -- send_to_device --------------------------------------------------------------------------------------
def test_send_to_device_moves_tensors_and_keeps_types() -> None:
    batch = Pair(torch.ones(1), [torch.ones(1), "label", 3])
    moved = send_to_device(batch, META)
    assert isinstance(moved, Pair)
    assert moved.x.device == META
    assert moved.y[0].device == META
    assert moved.y[1:] == ["label", 3]


def test_send_to_device_skips_keys_at_every_level() -> None:
    batch = {"x": torch.ones(1), "keep": torch.ones(1), "inner": {"keep": torch.ones(1), "y": torch.ones(1)}}
    moved = send_to_device(batch, META, skip_keys="keep")
    assert moved["x"].device == META
    assert moved["keep"].device.type == "cpu"
    assert moved["inner"]["keep"].device.type == "cpu"
    assert moved["inner"]["y"].device == META


def test_send_to_device_skip_keys_as_a_list() -> None:
    moved = send_to_device({"a": torch.ones(1), "b": torch.ones(1)}, META, skip_keys=["a", "b"])
    assert moved["a"].device.type == "cpu"


def test_send_to_device_keeps_mapping_types() -> None:
    data: defaultdict[str, Any] = defaultdict(list, {"x": torch.ones(1)})
    moved = send_to_device(data, META)
    assert isinstance(moved, defaultdict)
    assert moved.default_factory is list
    assert isinstance(send_to_device(OrderedDict(x=torch.ones(1)), META), OrderedDict)


class _Batch:
    """An object with a ``.to`` that takes no ``non_blocking``."""

    def __init__(self) -> None:
        self.device: torch.device | str = "cpu"

    def to(self, device: torch.device | str) -> _Batch:
        self.device = device
        return self


def test_send_to_device_retries_without_non_blocking() -> None:
    moved = send_to_device([_Batch()], META, non_blocking=True)
    assert moved[0].device == META


def test_send_to_device_moves_modules() -> None:
    module = send_to_device(torch.nn.Linear(1, 1), META)
    assert module.weight.device == META


# -- concatenate and slice -------------------------------------------------------------------------------
def test_concatenate_tensors() -> None:
    assert concatenate([torch.ones(1, 2), torch.zeros(2, 2)]).shape == (3, 2)
    assert concatenate([torch.ones(1, 2), torch.zeros(1, 3)], dim=1).shape == (1, 5)


def test_concatenate_nested_batches() -> None:
    out = concatenate([{"x": Pair(torch.ones(1), [torch.ones(2)])}, {"x": Pair(torch.zeros(1), [torch.zeros(2)])}])
    assert isinstance(out["x"], Pair)
    assert out["x"].x.tolist() == [1.0, 0.0]
    assert out["x"].y[0].tolist() == [1.0, 1.0, 0.0, 0.0]


def test_concatenate_one_non_tensor_batch_returns_it() -> None:
    assert concatenate(["a"]) == "a"


def test_concatenate_errors() -> None:
    with pytest.raises(TypeError, match="can only concatenate tensors, got str"):
        concatenate(["a", "b"])
    with pytest.raises(ValueError, match="at least one batch"):
        concatenate([])


def test_slice_tensors() -> None:
    out = slice_tensors({"x": torch.arange(5), "y": [torch.arange(5) * 2], "label": "a"}, slice(1, 3))
    assert out["x"].tolist() == [1, 2]
    assert out["y"][0].tolist() == [2, 4]
    assert out["label"] == "a"


# -- fp32 ------------------------------------------------------------------------------------------------
def test_convert_to_fp32_converts_half_precision_only() -> None:
    out = convert_to_fp32(
        {
            "h": torch.ones(1, dtype=torch.float16),
            "b": [torch.ones(1, dtype=torch.bfloat16)],
            "d": torch.ones(1, dtype=torch.float64),
            "i": torch.ones(1, dtype=torch.int32),
            "s": "x",
        }
    )
    assert out["h"].dtype == torch.float32
    assert out["b"][0].dtype == torch.float32
    assert out["d"].dtype == torch.float64
    assert out["i"].dtype == torch.int32
    assert out["s"] == "x"


def _half_outputs(x: Tensor) -> dict[str, Tensor]:
    return {"out": x.half(), "n": x.long()}


def test_convert_outputs_to_fp32_wraps_the_function() -> None:
    wrapped = convert_outputs_to_fp32(_half_outputs)
    out = wrapped(torch.ones(2))
    assert out["out"].dtype == torch.float32
    assert out["n"].dtype == torch.int64
    assert wrapped.__wrapped__ is _half_outputs  # type: ignore[attr-defined]
    assert wrapped.__name__ == "_half_outputs"


def test_convert_outputs_to_fp32_pickles() -> None:
    restored = pickle.loads(pickle.dumps(convert_outputs_to_fp32(_half_outputs)))
    assert restored(torch.ones(1))["out"].dtype == torch.float32


def test_convert_outputs_to_fp32_on_a_models_forward() -> None:
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    model.forward = convert_outputs_to_fp32(model.forward)  # type: ignore[method-assign]
    assert model(torch.ones(1, 2, dtype=torch.bfloat16)).dtype == torch.float32


def test_a_model_with_a_wrapped_forward_pickles() -> None:
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    model.forward = convert_outputs_to_fp32(model.forward)  # type: ignore[method-assign]
    restored = pickle.loads(pickle.dumps(model))
    assert restored.forward.__wrapped__ is not restored.forward
    assert restored(torch.ones(1, 2, dtype=torch.bfloat16)).dtype == torch.float32


# -- GatheredParameters ----------------------------------------------------------------------------------
class _RecordingStrategy(SingleDeviceStrategy):
    def __init__(self) -> None:
        super().__init__(device="cpu")
        self.calls: list[tuple[list[Tensor], int | None]] = []
        self.inside = False

    def gathered_parameters(
        self, params: Iterable[Tensor], modifier_rank: int | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        self.calls.append((list(params), modifier_rank))

        @contextlib.contextmanager
        def context() -> Iterator[str]:
            self.inside = True
            yield "gathered"
            self.inside = False

        return context()


@pytest.fixture
def strategy() -> Iterator[_RecordingStrategy]:
    recording = _RecordingStrategy()
    set_active_strategy(recording)
    yield recording
    set_active_strategy(None)


def test_gathered_parameters_without_a_strategy_does_nothing() -> None:
    set_active_strategy(None)
    with GatheredParameters(torch.nn.Linear(1, 1).parameters()) as value:
        assert value is None


def test_gathered_parameters_delegates_to_the_active_strategy(strategy: _RecordingStrategy) -> None:
    weight = torch.nn.Parameter(torch.ones(1))
    with GatheredParameters(weight, modifier_rank=0) as value:
        assert value == "gathered"
        assert strategy.inside
    assert not strategy.inside
    assert strategy.calls == [([weight], 0)]


def test_gathered_parameters_disabled(strategy: _RecordingStrategy) -> None:
    with GatheredParameters([torch.nn.Parameter(torch.ones(1))], enabled=False):
        pass
    assert strategy.calls == []


def test_gathered_parameters_with_the_base_strategy_is_a_no_op() -> None:
    base = SingleDeviceStrategy(device="cpu")
    set_active_strategy(base)
    try:
        with GatheredParameters(torch.nn.Linear(1, 1).parameters()) as value:
            assert value is None
    finally:
        set_active_strategy(None)


def test_active_strategy_is_held_weakly() -> None:
    set_active_strategy(SingleDeviceStrategy(device="cpu"))
    gc.collect()
    assert get_active_strategy() is None


def test_active_strategy_is_the_last_set(strategy: _RecordingStrategy) -> None:
    assert get_active_strategy() is strategy
