"""DeepSpeedStrategy and DeepSpeedPrecision against Lightning's: the same calls, the same results and errors.

Each test makes the same call on Lightning Fabric 2.6's class and on ours and compares the results, the
exception types and the key phrase of the messages. One process and no process group: what both can do
before ``fabric.launch()`` (Lightning's strategy refuses to launch on a CPU). Skipped without
``lightning_fabric`` (the ``compat`` test extra).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
import torch
from torch import nn

from fabric_core.environments.lightning import LightningEnvironment
from fabric_core.errors import InvalidConfigError
from fabric_core_deepspeed import DeepSpeedPrecision, DeepSpeedStrategy

lightning = pytest.importorskip("lightning_fabric.strategies.deepspeed")
lightning_precision = pytest.importorskip("lightning_fabric.plugins.precision.deepspeed")

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")


def raised(call: Callable[[], Any]) -> BaseException:
    """The exception ``call`` raises (the test fails if it returns)."""
    with pytest.raises(BaseException) as info:
        call()
    return info.value


def both(theirs: Callable[[], Any], ours: Callable[[], Any], kind: type[BaseException], phrase: str) -> BaseException:
    """Both calls raise ``kind`` with ``phrase`` in the message; return ours."""
    errors = raised(theirs), raised(ours)
    for error in errors:
        assert isinstance(error, kind), repr(error)
        assert phrase in str(error), str(error)
    return errors[1]


def test_a_missing_config_file_is_a_file_not_found_error() -> None:
    error = both(
        lambda: lightning.DeepSpeedStrategy(config="missing.json"),
        lambda: DeepSpeedStrategy(config="missing.json"),
        FileNotFoundError,
        "You passed in a path to a DeepSpeed config but the path does not exist: missing.json",
    )
    assert isinstance(error, InvalidConfigError)  # also ours: it names the argument
    assert error.argument == "config"


def test_the_config_is_kept_as_given_until_the_processes_are_set_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = {"optimizer": {"type": "SGD", "params": {"lr": 3e-5}}, "zero_optimization": {"stage": 2}}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(given))
    monkeypatch.delenv("FABRIC_CORE_DEEPSPEED_CONFIG_PATH", raising=False)
    monkeypatch.setenv("PL_DEEPSPEED_CONFIG_PATH", str(path))
    assert lightning.DeepSpeedStrategy().config == DeepSpeedStrategy().config == given
    monkeypatch.delenv("PL_DEEPSPEED_CONFIG_PATH")
    generated = (lightning.DeepSpeedStrategy(stage=3).config, DeepSpeedStrategy(stage=3).config)
    for config in generated:  # no precision section nor batch size yet (ours also turns DeepSpeed's clipping off)
        assert config["zero_optimization"]["stage"] == 3
        assert not {"fp16", "bf16", "train_micro_batch_size_per_gpu"} & set(config)


def test_an_unsupported_precision_names_the_supported_ones() -> None:
    error = both(
        lambda: lightning_precision.DeepSpeedPrecision(precision="64-true"),
        lambda: DeepSpeedPrecision(precision="64-true"),
        ValueError,
        "is not supported in DeepSpeed. `precision` must be one of",
    )
    assert all(repr(precision) in str(error) for precision in PRECISIONS)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_desired_dtype_is_lightnings(precision: str) -> None:
    theirs = lightning_precision.DeepSpeedPrecision(precision=precision)
    assert DeepSpeedPrecision(precision)._desired_dtype is theirs._desired_dtype


@pytest.mark.parametrize("indices", [[1], [1, 0], [0, 2]])
def test_device_indices_other_than_the_local_ranks_are_refused(indices: list[int]) -> None:
    from lightning_fabric.accelerators import CUDAAccelerator as LightningCUDAAccelerator

    from fabric_core.accelerators import CUDAAccelerator

    devices = [torch.device("cuda", index) for index in indices]
    # Mocks stand in for the GPUs this machine lacks; both strategies prepare the first device, then refuse.
    theirs, ours = Mock(spec=LightningCUDAAccelerator), Mock(spec=CUDAAccelerator)
    both(
        lambda: lightning.DeepSpeedStrategy(accelerator=theirs, parallel_devices=devices).setup_environment(),
        lambda: DeepSpeedStrategy(accelerator=ours, parallel_devices=devices).setup_environment(),
        RuntimeError,
        f"The selected device indices {indices!r} don't match the local rank values of processes",
    )
    theirs.setup_device.assert_called_once_with(devices[0])
    ours.setup_device.assert_called_once_with(devices[0])


def test_the_node_variables_deepspeed_reads_are_lightnings(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29512")
    seen = []
    for strategy in (lightning.DeepSpeedStrategy(), DeepSpeedStrategy()):
        for name in names[2:]:
            monkeypatch.delenv(name, raising=False)
        strategy.cluster_environment = LightningEnvironment()
        strategy.parallel_devices = [torch.device("cpu")]
        strategy._set_node_environment_variables()
        seen.append({name: os.environ[name] for name in names})
    assert seen[0] == seen[1] == {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"
    }  # fmt: skip


@pytest.mark.parametrize("method", ["clip_gradients_norm", "clip_gradients_value"])
def test_gradient_clipping_points_to_the_config(method: str) -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    both(
        lambda: getattr(lightning.DeepSpeedStrategy(), method)(model, optimizer, 1.0),
        lambda: getattr(DeepSpeedStrategy(), method)(model, optimizer, 1.0),
        NotImplementedError,
        "DeepSpeed handles gradient clipping automatically within the optimizer. Make sure to set the "
        "`gradient_clipping` value in your Config",
    )


def test_save_refuses_a_filter(tmp_path: Path) -> None:
    both(
        lambda: lightning.DeepSpeedStrategy().save_checkpoint(tmp_path, {}, filter={}),
        lambda: DeepSpeedStrategy().save_checkpoint(tmp_path, {}, filter={}),
        TypeError,
        "`DeepSpeedStrategy` manages the state serialization internally",
    )


def _backward_of_two_models_without_model(fabric_class: Any) -> None:
    """Lightning's own test: two models set up on a one-process DeepSpeed Fabric with the strategy's setup replaced
    by the identity (no engine is built), then ``fabric.backward(loss)`` without ``model=``."""
    fabric = fabric_class(strategy="deepspeed", devices=1)
    fabric._launched = True
    fabric._strategy.setup_module_and_optimizers = lambda *args: args
    models = [nn.Linear(1, 2), nn.Linear(1, 2)]
    for model in models:
        fabric.setup(model, torch.optim.Adam(model.parameters()))
    fabric.backward(models[0](torch.randn(1, 1)).sum())


def test_backward_after_two_models_asks_for_the_model_before_the_strategy_is_reached() -> None:
    # Fabric counts the models set up and asks, as Lightning's does; the strategy, which would look for engines
    # and find none, is not reached. With real engines the strategy asks the same (test_deepspeed_training.py).
    from lightning_fabric import Fabric as LightningFabric

    from fabric_core import Fabric

    both(
        lambda: _backward_of_two_models_without_model(LightningFabric),
        lambda: _backward_of_two_models_without_model(Fabric),
        ValueError,
        "When using multiple models + deepspeed, please provide the model used to perform the optimization",
    )


@pytest.mark.parametrize("state", [None, {}])
def test_load_needs_a_state_with_a_model(tmp_path: Path, state: dict[str, Any] | None) -> None:
    both(
        lambda: lightning.DeepSpeedStrategy().load_checkpoint(tmp_path, state=state),
        lambda: DeepSpeedStrategy().load_checkpoint(tmp_path, state=state),
        ValueError,
        f"Got DeepSpeedStrategy.load_checkpoint(..., state={state!r}) but a state with at least",
    )


@pytest.mark.parametrize("where", ["empty", "missing", "tag", "file", "latest"])
def test_a_path_that_is_not_a_checkpoint_folder_is_refused(tmp_path: Path, where: str) -> None:
    folder = tmp_path / "step=10.ckpt"
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "checkpoint" / "mp_rank_00_model_states.pt").write_bytes(b"")
    (folder / "latest").write_text("checkpoint")
    (tmp_path / "empty").mkdir()
    path = {
        "empty": tmp_path / "empty",
        "missing": tmp_path / "nope",
        "tag": folder / "checkpoint",
        "file": folder / "checkpoint" / "mp_rank_00_model_states.pt",
        "latest": folder / "latest",
    }[where]
    state = {"model": nn.Linear(2, 2)}
    error = both(
        lambda: lightning.DeepSpeedStrategy().load_checkpoint(path, state=state),
        lambda: DeepSpeedStrategy().load_checkpoint(path, state=state),
        FileNotFoundError,
        f"The provided path is not a valid DeepSpeed checkpoint: {path}",
    )
    if where in ("tag", "file", "latest"):  # inside a checkpoint folder: both name the folder to load
        assert re.search(f"Try to load using this parent directory instead: {re.escape(str(folder))}$", str(error))
    else:
        assert "parent directory" not in str(error)
