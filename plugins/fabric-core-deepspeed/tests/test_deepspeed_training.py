"""DeepSpeed training on two real CPU processes (gloo): ZeRO stages 1-3 match one process on the full batch.

Starting processes and DeepSpeed engines dominates the cost, so one job runs every check: this file, run
as a script, starts ``Fabric(strategy=spec("deepspeed_stage_1", start_method="spawn"), devices=2)``; inside
the two workers further ``Fabric`` objects (stages 2 and 3, bf16) join the same process group, as under
torchrun. Each rank writes what it saw to a JSON file; the tests read those records. Running the file as a
script lets the spawned workers import it as ``__main__`` whatever pytest's import mode.

The first DeepSpeed run on a machine JIT-compiles a small communication op (about 30 s, then cached in
``~/.cache/torch_extensions``); the timeout allows for it.
"""

from __future__ import annotations

import json
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.deepspeed, pytest.mark.multiprocess, pytest.mark.timeout(240)]

WORLD_SIZE = 2
STEPS = 3
JOB_TIMEOUT = 220
# Collectives give up after this long, so that a rank left alone exits by itself instead of hanging.
COLLECTIVE_TIMEOUT = timedelta(seconds=60)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def make_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 4, generator=generator), torch.randn(8, 2, generator=generator)) for _ in range(STEPS)]


def reference_parameters() -> list[torch.Tensor]:
    """The same model trained in one process on the full batches."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in make_batches():
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def train(fabric: Any, precision_dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Train on this rank's half of each batch; return how far the result is from the reference."""
    if fabric.strategy.zero_stage_3:
        # DeepSpeed keeps parameters smaller than this threshold whole; 0 makes the tiny model really sharded.
        fabric.strategy.config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    seen: dict[str, Any] = {
        "model_is_the_engine": fabric.strategy.model is model._forward_module,
        "engine": type(model._forward_module).__name__,
        "optimizer": type(optimizer.optimizer).__name__,
    }
    rank, half = fabric.global_rank, 8 // WORLD_SIZE
    for x, y in make_batches():
        output = model(x[rank * half : (rank + 1) * half])
        seen["output_dtype"] = str(output.dtype)
        loss = nn.functional.mse_loss(output, y[rank * half : (rank + 1) * half])
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    module = model.module
    seen["param_dtype"] = str(next(module.parameters()).dtype)
    seen["sharded"] = [p.numel() == 0 for p in module.parameters()]
    with fabric.strategy.gathered_parameters(module.parameters()):
        trained = [p.detach().float().clone() for p in module.parameters()]
    seen["gathered_numel"] = sum(p.numel() for p in trained)
    seen["max_diff"] = max((a - b).abs().max().item() for a, b in zip(trained, reference_parameters()))
    return seen


def expect_error(seen: dict[str, Any], name: str, function: Any) -> None:
    try:
        function()
    except Exception as error:  # the records say which type it was
        seen[name] = f"{type(error).__name__}: {error}"
    else:
        seen[name] = None


def new_fabric(strategy: str, precision: str | None = None) -> Any:
    """Another Fabric in this worker: it joins the running process group, as under torchrun."""
    from fabric_core import Fabric, spec

    fabric = Fabric(
        accelerator="cpu", strategy=spec(strategy, timeout=COLLECTIVE_TIMEOUT), devices=2, precision=precision
    )
    fabric.launch()
    return fabric


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = make_model()
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def error_checks(fabric: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    model, optimizer = model_and_optimizer()
    expect_error(seen, "setup_optimizers", lambda: fabric.setup_optimizers(optimizer))
    second = torch.optim.SGD(model.parameters(), lr=0.1)
    expect_error(seen, "two_optimizers", lambda: fabric.setup(model, optimizer, second))
    first, first_opt = fabric.setup(*model_and_optimizer())
    other, _ = fabric.setup(*model_and_optimizer())
    loss = first(torch.ones(2, 4)).sum()
    expect_error(seen, "backward_without_model", lambda: fabric.backward(loss))
    expect_error(seen, "raw_backward", lambda: first(torch.ones(2, 4)).sum().backward())
    fabric.backward(loss, model=first)
    seen["backward_with_model"] = True
    expect_error(seen, "clip_gradients", lambda: fabric.clip_gradients(first, first_opt, max_norm=1.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fabric.no_backward_sync(first):
            pass
    seen["no_backward_sync_warning"] = [str(w.message) for w in caught if "skipping" in str(w.message)]
    seen["other_engine"] = type(other._forward_module).__name__
    alone = fabric.setup(make_model())  # no optimizer: an engine for evaluation
    seen["model_alone"] = [type(alone._forward_module).__name__, list(alone(torch.ones(3, 4)).shape)]
    seen["model_alone_stage"] = alone._forward_module.zero_optimization_stage()
    return seen


def config_optimizer_checks() -> dict[str, Any]:
    """A config with an ``optimizer`` section: DeepSpeed builds it, so a model alone keeps the config's stage."""
    from fabric_core import Fabric
    from fabric_core_deepspeed import DeepSpeedStrategy

    config = {"zero_optimization": {"stage": 2}, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}}
    strategy = DeepSpeedStrategy(config={**config, "zero_allow_untested_optimizer": True}, timeout=COLLECTIVE_TIMEOUT)
    fabric = Fabric(accelerator="cpu", strategy=strategy, devices=2)
    seen: dict[str, Any] = {"config_before_launch": sorted(strategy.config)}
    fabric.launch()
    seen["config_after_launch"] = sorted(strategy.config)
    engine = fabric.setup(make_model())._forward_module
    seen["stage_and_optimizer"] = [engine.zero_optimization_stage(), type(engine.optimizer).__name__]
    return seen


def worker(fabric: Any, out_dir: str) -> None:
    seen: dict[str, Any] = {"stage_1": train(fabric)}
    seen["errors"] = error_checks(fabric)
    seen["config_optimizer"] = config_optimizer_checks()
    for stage in (2, 3):
        seen[f"stage_{stage}"] = train(new_fabric(f"deepspeed_stage_{stage}"))
        seen[f"stage_{stage}_bf16"] = train(new_fabric(f"deepspeed_stage_{stage}", "bf16-mixed"))
    stage_3 = new_fabric("deepspeed_stage_3")
    expect_error(seen, "init_module_empty_init_false", lambda: stage_3.init_module(empty_init=False).__enter__())
    stage_3.strategy.config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    with stage_3.init_module():
        created = nn.Linear(16, 16)
    seen["init_module_partitioned"] = [hasattr(p, "ds_id") and p.numel() == 0 for p in created.parameters()]
    seen["init_module_full_numel"] = [int(p.ds_numel) for p in created.parameters()]
    with stage_3.strategy.module_sharded_context():
        sharded = nn.Linear(16, 16)
    seen["module_sharded_context_partitioned"] = [hasattr(p, "ds_id") and p.numel() == 0 for p in sharded.parameters()]
    created = stage_3.setup(created)
    seen["init_module_forward"] = list(created(torch.ones(3, 16)).shape)
    Path(out_dir, f"rank{fabric.global_rank}.json").write_text(json.dumps(seen))


def main(out_dir: str) -> None:
    from fabric_core import Fabric, spec

    strategy = spec("deepspeed_stage_1", start_method="spawn", timeout=COLLECTIVE_TIMEOUT)
    fabric = Fabric(accelerator="cpu", strategy=strategy, devices=WORLD_SIZE)
    fabric.launch(worker, out_dir)


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory, run_job: Any) -> list[dict[str, Any]]:
    out_dir = tmp_path_factory.mktemp("deepspeed_training")
    return run_job(__file__, out_dir, JOB_TIMEOUT)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_stage_matches_one_process_on_the_full_batch(seen: list[dict[str, Any]], stage: int) -> None:
    for rank in range(WORLD_SIZE):
        record = seen[rank][f"stage_{stage}"]
        assert record["engine"] == "DeepSpeedEngine"
        assert record["model_is_the_engine"] is True  # strategy.model is the engine of the last setup
        assert record["max_diff"] < 1e-5, record
        assert record["output_dtype"] == "torch.float32"
        assert record["gathered_numel"] == 4 * 8 + 8 + 8 * 2 + 2


def test_stages_wrap_the_optimizer_in_their_zero_optimizer(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["stage_1"]["optimizer"] == "DeepSpeedZeroOptimizer"
    assert seen[0]["stage_2"]["optimizer"] == "DeepSpeedZeroOptimizer"
    assert seen[0]["stage_3"]["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"


def test_stage_3_shards_parameters_and_gathers_them_on_request(seen: list[dict[str, Any]]) -> None:
    for rank in range(WORLD_SIZE):
        assert all(seen[rank]["stage_3"]["sharded"])
        assert not any(seen[rank]["stage_2"]["sharded"])


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_mixed_trains_in_bf16_close_to_the_fp32_reference(seen: list[dict[str, Any]], stage: int) -> None:
    for rank in range(WORLD_SIZE):
        record = seen[rank][f"stage_{stage}_bf16"]
        assert record["param_dtype"] == "torch.bfloat16"
        assert record["output_dtype"] == "torch.float32"
        assert 0 < record["max_diff"] < 2e-2, record


def test_setup_optimizers_alone_is_refused(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["errors"]["setup_optimizers"].startswith("RuntimeError: The `DeepSpeedStrategy` requires the model")


def test_only_one_optimizer(seen: list[dict[str, Any]]) -> None:
    message = seen[0]["errors"]["two_optimizers"]
    assert message.startswith("ValueError: Currently only one optimizer is supported with DeepSpeed. Got 2")


def test_backward_with_several_models_needs_the_model(seen: list[dict[str, Any]]) -> None:
    errors = seen[0]["errors"]
    assert errors["backward_without_model"].startswith("ValueError: When using multiple models + deepspeed")
    assert errors["backward_with_model"] is True
    assert errors["other_engine"] == "DeepSpeedEngine"


def test_a_model_without_optimizer_gets_an_engine(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["errors"]["model_alone"] == ["DeepSpeedEngine", [3, 2]]
    assert seen[0]["errors"]["model_alone_stage"] == 0  # stage 1 has nothing to shard without an optimizer


def test_a_model_alone_keeps_the_stage_when_the_config_has_an_optimizer(seen: list[dict[str, Any]]) -> None:
    # As in Lightning: DeepSpeed builds the config's optimizer and shards it with the config's stage.
    for rank in range(WORLD_SIZE):
        assert seen[rank]["config_optimizer"]["stage_and_optimizer"] == [2, "DeepSpeedZeroOptimizer"]


def test_the_config_is_completed_when_the_processes_are_set_up(seen: list[dict[str, Any]]) -> None:
    checks = seen[0]["config_optimizer"]
    assert checks["config_before_launch"] == ["optimizer", "zero_allow_untested_optimizer", "zero_optimization"]
    assert checks["config_after_launch"] == sorted([*checks["config_before_launch"], "train_micro_batch_size_per_gpu"])


def test_raw_backward_is_refused(seen: list[dict[str, Any]]) -> None:
    assert "fabric.backward(loss)" in seen[0]["errors"]["raw_backward"]


def test_clip_gradients_points_to_the_config(seen: list[dict[str, Any]]) -> None:
    assert seen[0]["errors"]["clip_gradients"].startswith("NotImplementedError: DeepSpeed handles gradient clipping")
    assert "gradient_clipping" in seen[0]["errors"]["clip_gradients"]


def test_no_backward_sync_warns_that_it_is_unsupported(seen: list[dict[str, Any]]) -> None:
    (message,) = seen[0]["errors"]["no_backward_sync_warning"]
    assert "`DeepSpeedStrategy` does not support skipping the gradient synchronization" in message


def test_stage_3_init_module_creates_partitioned_parameters(seen: list[dict[str, Any]]) -> None:
    for rank in range(WORLD_SIZE):
        assert seen[rank]["init_module_partitioned"] == [True, True]
        assert seen[rank]["init_module_full_numel"] == [256, 16]
        assert seen[rank]["init_module_forward"] == [3, 16]
        assert seen[rank]["module_sharded_context_partitioned"] == [True, True]
        assert seen[rank]["init_module_empty_init_false"].startswith("NotImplementedError: `empty_init=False`")


if __name__ == "__main__":
    main(sys.argv[1])
