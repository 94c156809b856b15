"""Lightning's small utility names under fabric_core: exceptions, warnings, enums, types, spike detection,
and the worker seeding that draws Lightning's streams. Each compared with lightning_fabric where it exists."""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fabric_core import Fabric
from fabric_core.errors import FabricCoreError, InvalidConfigError
from fabric_core.utilities.enums import LightningEnum
from fabric_core.utilities.exceptions import MisconfigurationException
from fabric_core.utilities.seed import pl_worker_init_function
from fabric_core.utilities.spike import SpikeDetection, TrainingSpikeException
from fabric_core.utilities.types import (
    _DEVICE,
    _PATH,
    CollectibleGroup,
    LRScheduler,
    Optimizable,
    ReduceLROnPlateau,
    Steppable,
    _Stateful,
)
from fabric_core.utilities.warnings import PossibleUserWarning, disable_possible_user_warnings

lightning_seed = pytest.importorskip("lightning_fabric.utilities.seed")


# -- exceptions and warnings ----------------------------------------------------------------------------------
def test_misconfiguration_exception_is_an_exception_of_ours() -> None:
    with pytest.raises(MisconfigurationException, match="bad"):
        raise MisconfigurationException("bad")
    assert issubclass(MisconfigurationException, FabricCoreError) and issubclass(MisconfigurationException, Exception)


def test_possible_user_warning_is_the_one_fabric_core_emits() -> None:
    from fabric_core import errors

    assert PossibleUserWarning is errors.PossibleUserWarning
    assert issubclass(PossibleUserWarning, UserWarning)


def test_disable_possible_user_warnings_silences_only_that_category() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        disable_possible_user_warnings()
        warnings.warn("maybe wrong", PossibleUserWarning, stacklevel=1)
        warnings.warn("certainly shown", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["certainly shown"]


def test_disable_possible_user_warnings_for_one_module_only() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        disable_possible_user_warnings(module="some_other_module")
        warnings.warn("still shown", PossibleUserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["still shown"]


# -- LightningEnum ------------------------------------------------------------------------------------------
class _Stage(LightningEnum):
    FIT = "fit"
    VALIDATE = "Validate-Stage"


def test_lightning_enum_behaves_as_lightnings() -> None:
    from lightning_fabric.utilities.enums import LightningEnum as Theirs

    class TheirStage(Theirs):
        FIT = "fit"
        VALIDATE = "Validate-Stage"

    for ours, theirs in ((_Stage, TheirStage),):
        for text in ("FIT", "fit", "Fit", "validate-stage", "Validate-Stage", "nope"):
            assert (text == ours.FIT) == (text == theirs.FIT)
            assert (text == ours.VALIDATE) == (text == theirs.VALIDATE)
        for source in ("key", "value", "any"):
            for text in ("fit", "VALIDATE", "Validate-Stage"):
                try:
                    expected = theirs.from_str(text, source=source).name
                except ValueError as err:
                    with pytest.raises(ValueError, match="Invalid match"):
                        ours.from_str(text, source=source)
                    assert "Invalid match" in str(err)
                else:
                    assert ours.from_str(text, source=source).name == expected
    assert len({_Stage.FIT, "fit", _Stage.VALIDATE}) == 2  # a member and its value hash alike
    assert _Stage.FIT != _Stage.VALIDATE
    with pytest.warns(UserWarning, match="Invalid string"):
        assert _Stage.try_from_str("nothing") is None


# -- types -------------------------------------------------------------------------------------------------
def test_protocols_recognise_torch_objects() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert isinstance(optimizer, Optimizable) and isinstance(optimizer, Steppable)
    assert isinstance(optimizer, _Stateful) and isinstance(model, _Stateful)
    assert not isinstance(object(), Optimizable) and not isinstance(object(), _Stateful)
    assert isinstance(torch.optim.lr_scheduler.StepLR(optimizer, 1), LRScheduler)
    assert isinstance(torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer), ReduceLROnPlateau)

    class Group:
        def size(self) -> int:
            return 2

        def rank(self) -> int:
            return 0

    assert isinstance(Group(), CollectibleGroup) and not isinstance(model, CollectibleGroup)
    assert set(_PATH.__args__) == {str, Path}
    assert set(_DEVICE.__args__) == {torch.device, str, int}


# -- worker seeding ----------------------------------------------------------------------------------------
class _Draws(Dataset[Any]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> list[float]:
        return [torch.rand(1).item(), random.random(), float(np.random.rand()), float(torch.randint(0, 2**30, ()))]


def _worker_draws(init_fn: Any, seed: int) -> list[list[float]]:
    torch.manual_seed(seed)
    loader = DataLoader(_Draws(), batch_size=None, num_workers=2, worker_init_fn=init_fn)
    return [row for row in loader]


@pytest.mark.parametrize("rank", [0, 3])
def test_pl_worker_init_function_draws_lightnings_streams_bitwise(rank: int) -> None:
    from functools import partial

    ours = _worker_draws(partial(pl_worker_init_function, rank=rank), 42)
    theirs = _worker_draws(partial(lightning_seed.pl_worker_init_function, rank=rank), 42)
    assert ours == theirs  # exact floats: the same generators, seeded the same
    assert ours[0] != ours[1]  # two workers draw differently
    other_rank = _worker_draws(partial(pl_worker_init_function, rank=rank + 1), 42)
    assert other_rank != ours


def test_pl_worker_init_function_in_process_matches_lightning() -> None:
    states = []
    for fn in (pl_worker_init_function, lightning_seed.pl_worker_init_function):
        torch.manual_seed(1234 + 5)  # as DataLoader would seed worker 5 of base seed 1234
        fn(5, rank=7)
        states.append((torch.get_rng_state(), random.getstate(), np.random.get_state()[1].tolist()))
    assert torch.equal(states[0][0], states[1][0])
    assert states[0][1] == states[1][1] and states[0][2] == states[1][2]


# -- SpikeDetection ----------------------------------------------------------------------------------------
def _run(detector: SpikeDetection, losses: list[float]) -> int | None:
    fabric = Fabric(accelerator="cpu", devices=1, callbacks=[detector])
    for i, value in enumerate(losses):
        try:
            fabric.call("on_train_batch_end", fabric=fabric, loss=torch.tensor(value), batch=None, batch_idx=i)
        except TrainingSpikeException as err:
            assert err.batch_idx == i
            return i
    return None


def test_spike_is_detected_and_batches_to_skip_written(tmp_path: Path) -> None:
    detector = SpikeDetection(window=3, exclude_batches_path=tmp_path)
    assert _run(detector, [5.0, 4.0, 3.5, 3.6, 3.4, 20.0, 3.0]) == 5
    assert json.loads((tmp_path / "skip_batches.json").read_text()) == [4, 5]
    assert isinstance(TrainingSpikeException(1), RuntimeError)


def test_no_spike_for_improvements_small_rises_or_warmup(tmp_path: Path) -> None:
    assert _run(SpikeDetection(window=3, exclude_batches_path=tmp_path), [5.0, 4.0, 4.5, 4.2, 3.0, 1.0]) is None
    assert _run(SpikeDetection(warmup=3, exclude_batches_path=tmp_path), [1.0, 100.0, 2.0, 1.0]) is None
    assert not (tmp_path / "skip_batches.json").exists()


def test_mode_max_and_atol(tmp_path: Path) -> None:
    # A drop is a spike when higher is better; atol=10 lets a drop of 5 through but not one of 50.
    path = tmp_path / "spikes.json"
    assert _run(SpikeDetection(mode="max", atol=10, rtol=None, exclude_batches_path=path), [50, 55, 50, 52]) is None
    assert _run(SpikeDetection(mode="max", atol=10, rtol=None, exclude_batches_path=path), [50, 55, 5.0]) == 2
    assert json.loads(path.read_text()) == [1, 2]


def test_non_finite_loss(tmp_path: Path) -> None:
    assert _run(SpikeDetection(exclude_batches_path=tmp_path), [1.0, 1.0, float("nan")]) == 2
    lenient = SpikeDetection(exclude_batches_path=tmp_path, finite_only=False)
    assert _run(lenient, [1.0, 1.0, float("nan"), 1.0]) is None
    assert lenient.running_mean == 1.0  # the NaN was left out of the mean


def test_state_dict_round_trip(tmp_path: Path) -> None:
    detector = SpikeDetection(window=2, exclude_batches_path=tmp_path)
    _run(detector, [3.0, 2.0, 1.0])
    state = detector.state_dict()
    restored = SpikeDetection(window=5)
    restored.load_state_dict(state)
    assert restored.running_mean == detector.running_mean == 1.5
    assert restored.state_dict() == state


@pytest.mark.parametrize(("argument", "value"), [("mode", "avg"), ("window", 0)])
def test_bad_arguments(argument: str, value: Any) -> None:
    with pytest.raises(InvalidConfigError, match=argument):
        SpikeDetection(**{argument: value})


def test_attribute_dict_at_lightnings_path() -> None:
    from fabric_core.utilities.attribute_dict import AttributeDict
    from fabric_core.utilities.data import AttributeDict as at_data_path

    assert at_data_path is AttributeDict
    hparams = at_data_path(lr=0.1)
    hparams.batch_size = 32
    assert hparams == {"lr": 0.1, "batch_size": 32}


def test_lightning_utilities_package_names_are_importable_from_ours() -> None:
    import lightning_fabric.utilities as theirs

    import fabric_core.utilities as ours

    # `is_shared_filesystem` lives in utilities.distributed, which another change adds.
    missing = {name for name in theirs.__all__ if not hasattr(ours, name)} - {"is_shared_filesystem"}
    assert missing == set()
    assert ours.disable_possible_user_warnings is disable_possible_user_warnings
    assert ours.LightningEnum is LightningEnum


def test_sized_len_matches_lightning() -> None:
    from lightning_fabric.utilities.data import sized_len as theirs

    from fabric_core.utilities.data import sized_len

    class NoLen(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Iterator[int]:
            return iter(range(3))

    class Broken:
        def __len__(self) -> int:
            raise NotImplementedError

    for thing in ([1, 2, 3], DataLoader(list(range(10)), batch_size=4), NoLen(), DataLoader(NoLen()), Broken(), 5):
        assert sized_len(thing) == theirs(thing)
    assert sized_len(DataLoader(list(range(10)), batch_size=4)) == 3


@pytest.mark.timeout(60)
def test_seeded_workers_of_setup_dataloaders_draw_what_lightnings_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_fabric import Fabric as LightningFabric

    from fabric_core.utilities.seed import seed_everything, worker_init_function

    for name in ("FABRIC_CORE_GLOBAL_SEED", "PL_GLOBAL_SEED", "FABRIC_CORE_SEED_WORKERS", "PL_SEED_WORKERS"):
        monkeypatch.setenv(name, "0")  # so that monkeypatch restores what seed_everything writes
        monkeypatch.delenv(name)

    def draws(fabric: Any, seed_fn: Any) -> list[list[float]]:
        seed_fn(42, workers=True)
        loader = fabric.setup_dataloaders(DataLoader(_Draws(), batch_size=None, num_workers=2))
        return [row for row in loader]

    assert pl_worker_init_function is worker_init_function
    ours = draws(Fabric(accelerator="cpu", devices=1), seed_everything)
    theirs = draws(LightningFabric(accelerator="cpu", devices=1), lightning_seed.seed_everything)
    assert ours == theirs
    assert ours[0] != ours[1]
