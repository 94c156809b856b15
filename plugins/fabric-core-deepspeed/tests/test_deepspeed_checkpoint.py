"""DeepSpeed checkpoint folders on two real CPU processes: save, load, consolidate, and the errors.

One job runs every check: this file, run as a script, starts ``Fabric(strategy="deepspeed_stage_3",
devices=2)`` with DeepSpeed's default launcher, which runs the script again for rank 1. Inside, a stage-2
``Fabric`` joins the same process group. Each rank writes what it saw to a JSON file; the tests read it.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

pytestmark = [pytest.mark.deepspeed, pytest.mark.multiprocess, pytest.mark.timeout(240)]

WORLD_SIZE = 2
JOB_TIMEOUT = 220
COLLECTIVE_TIMEOUT = timedelta(seconds=60)
PARAMETER_NAMES = ["0.weight", "0.bias", "2.weight", "2.bias"]


class Counter:
    """A stateful extra: saved through ``state_dict()`` and restored in place."""

    def __init__(self, value: int) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.value = state_dict["value"]


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def set_up(fabric: Any, seed: int = 0) -> tuple[Any, Any]:
    model = make_model(seed)
    return fabric.setup(model, torch.optim.Adam(model.parameters(), lr=0.05))  # type: ignore[no-any-return]


def step(fabric: Any, model: Any, optimizer: Any, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed * 10 + fabric.global_rank)
    x, y = torch.randn(4, 4, generator=generator), torch.randn(4, 2, generator=generator)
    fabric.backward(nn.functional.mse_loss(model(x), y), model=model)
    optimizer.step()
    optimizer.zero_grad()


def parameters(fabric: Any, model: Any) -> list[torch.Tensor]:
    module = model.module
    with fabric.strategy.gathered_parameters(module.parameters()):
        return [p.detach().float().clone() for p in module.parameters()]


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def expect_error(seen: dict[str, Any], name: str, function: Any) -> None:
    try:
        function()
    except Exception as error:  # the records say which type it was
        seen[name] = f"{type(error).__name__}: {error}"
    else:
        seen[name] = None


def round_trip(fabric: Any, folder: Path) -> dict[str, Any]:
    """Save after two steps; load into a freshly set-up model and optimizer; the next step must match."""
    if fabric.strategy.zero_stage_3:
        fabric.strategy.config["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    seen: dict[str, Any] = {}
    model, optimizer = set_up(fabric)
    for seed in (1, 2):
        step(fabric, model, optimizer, seed)
    saved = parameters(fabric, model)
    state = {"model": model, "optimizer": optimizer, "step": 2, "meta": {"tags": ["a", "b"]}, "counter": Counter(5)}
    fabric.save(folder, {**state, "step": 1})
    fabric.save(folder, state)  # replaces the first folder in one step
    fabric.barrier()
    seen["files"] = sorted(p.name for p in (folder / "checkpoint").iterdir())
    seen["hidden"] = sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))
    step(fabric, model, optimizer, 3)
    expected_next = parameters(fabric, model)

    fresh, fresh_optimizer = set_up(fabric, seed=7)
    seen["fresh_differs"] = max_diff(parameters(fabric, fresh), saved) > 1e-3
    restored = {"model": fresh, "optimizer": fresh_optimizer, "step": 0, "meta": None, "counter": Counter(0)}
    seen["remainder"] = fabric.load(folder, restored)
    seen["restored_diff"] = max_diff(parameters(fabric, fresh), saved)
    seen["extras"] = [restored["step"], restored["meta"], restored["counter"].value]
    seen["wrappers_kept"] = restored["model"] is fresh and restored["optimizer"] is fresh_optimizer
    step(fabric, fresh, fresh_optimizer, 3)
    seen["next_step_diff"] = max_diff(parameters(fabric, fresh), expected_next)

    seen["partial_remainder"] = fabric.load(folder, {"model": fresh})
    seen["saved"] = [p.flatten().tolist() for p in saved]
    expect_error(seen, "strict_missing_key", lambda: fabric.load(folder, {"model": fresh, "missing": 1}))
    seen["lenient_missing_key"] = sorted(fabric.load(folder, {"model": fresh, "missing": 1}, strict=False))
    return seen


def errors(fabric: Any, folder: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    model, _ = set_up(fabric)
    expect_error(seen, "filter", lambda: fabric.save(folder / "f", {"model": model}, filter={"model": lambda k, v: 1}))
    expect_error(seen, "save_without_model", lambda: fabric.save(folder / "g", {"step": 1}))
    expect_error(seen, "load_empty_state", lambda: fabric.load(folder / "stage_3", {}))
    expect_error(seen, "load_missing_folder", lambda: fabric.load(folder / "nope", {"model": model}))
    expect_error(seen, "load_not_a_checkpoint", lambda: fabric.load(folder, {"model": model}))
    return seen


def consolidated(fabric: Any, folder: Path) -> dict[str, Any]:
    """Rank 0 consolidates the stage-3 folder; every rank loads the file back into a stage-3 model."""
    from fabric_core_deepspeed import consolidate

    seen: dict[str, Any] = {}
    output = folder.with_name(folder.name + ".consolidated")
    if fabric.global_rank == 0:
        seen["output"] = str(consolidate(folder))
        expect_error(seen, "output_exists", lambda: consolidate(folder, output))
    fabric.barrier()
    model, _ = set_up(fabric, seed=9)
    seen["remainder"] = sorted(fabric.load(output, {"model": model}))
    seen["loaded"] = [p.flatten().tolist() for p in parameters(fabric, model)]
    return seen


def worker(fabric: Any, out_dir: str) -> None:
    from fabric_core import Fabric, spec

    root = Path(out_dir)
    seen: dict[str, Any] = {"stage_3": round_trip(fabric, root / "stage_3")}
    seen["errors"] = errors(fabric, root)
    seen["consolidated"] = consolidated(fabric, root / "stage_3")
    stage_2 = Fabric(accelerator="cpu", strategy=spec("deepspeed_stage_2", timeout=COLLECTIVE_TIMEOUT), devices=2)
    stage_2.launch()
    seen["stage_2"] = round_trip(stage_2, root / "stage_2")
    Path(out_dir, f"rank{fabric.global_rank}.json").write_text(json.dumps(seen))


def main(out_dir: str) -> None:
    from fabric_core import Fabric, spec

    strategy = spec("deepspeed_stage_3", timeout=COLLECTIVE_TIMEOUT)
    fabric = Fabric(accelerator="cpu", strategy=strategy, devices=WORLD_SIZE)
    fabric.launch()  # DeepSpeed's default launcher: this script runs again as local rank 1
    worker(fabric, out_dir)


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deepspeed_checkpoint")


@pytest.fixture(scope="module")
def seen(out_dir: Path, run_job: Any) -> list[dict[str, Any]]:
    return run_job(__file__, out_dir, JOB_TIMEOUT)


@pytest.mark.parametrize("stage", [2, 3])
def test_load_restores_parameters_into_a_fresh_model(seen: list[dict[str, Any]], stage: int) -> None:
    for rank in range(WORLD_SIZE):
        record = seen[rank][f"stage_{stage}"]
        assert record["fresh_differs"] is True
        assert record["restored_diff"] == 0.0
        assert record["wrappers_kept"] is True


@pytest.mark.parametrize("stage", [2, 3])
def test_load_restores_the_optimizer_state(seen: list[dict[str, Any]], stage: int) -> None:
    # Adam's moments and step count decide the next update: it matches only if they were restored.
    for rank in range(WORLD_SIZE):
        assert seen[rank][f"stage_{stage}"]["next_step_diff"] < 1e-6


@pytest.mark.parametrize("stage", [2, 3])
def test_load_restores_extras_and_returns_what_was_not_asked_for(seen: list[dict[str, Any]], stage: int) -> None:
    for rank in range(WORLD_SIZE):
        record = seen[rank][f"stage_{stage}"]
        assert record["extras"] == [2, {"tags": ["a", "b"]}, 5]
        assert record["remainder"] == {}
        assert record["partial_remainder"] == {"step": 2, "meta": {"tags": ["a", "b"]}, "counter": {"value": 5}}


@pytest.mark.parametrize("stage", [2, 3])
def test_strict_loading_of_a_missing_key(seen: list[dict[str, Any]], stage: int) -> None:
    record = seen[0][f"stage_{stage}"]
    assert record["strict_missing_key"].startswith("KeyError")
    assert "'missing'" in record["strict_missing_key"] and "strict=False" in record["strict_missing_key"]
    assert record["lenient_missing_key"] == ["counter", "meta", "step"]


def test_checkpoint_folders_hold_each_ranks_shards(seen: list[dict[str, Any]]) -> None:
    # Saved twice to the same path: the second save replaced the first, and nothing hidden is left.
    assert [seen[0][f"stage_{stage}"]["hidden"] for stage in (2, 3)] == [[], []]
    assert seen[0]["stage_2"]["files"] == [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    assert seen[0]["stage_3"]["files"] == [
        f"zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt" for r in range(WORLD_SIZE) for kind in ("model", "optim")
    ]


def test_save_errors(seen: list[dict[str, Any]]) -> None:
    errors = seen[0]["errors"]
    assert errors["filter"].startswith(
        "TypeError: `DeepSpeedStrategy.save_checkpoint(..., filter=...)` is not supported"
    )
    assert errors["save_without_model"].startswith("ValueError: Could not find a DeepSpeed model")


def test_load_errors(seen: list[dict[str, Any]]) -> None:
    errors = seen[0]["errors"]
    assert errors["load_empty_state"].startswith("ValueError: Got DeepSpeedStrategy.load_checkpoint(..., state={})")
    assert errors["load_missing_folder"].startswith("FileNotFoundError: The provided path is not a valid DeepSpeed")
    assert "(nothing exists there)" in errors["load_missing_folder"]
    assert "has no 'checkpoint' sub-folder" in errors["load_not_a_checkpoint"]


def test_consolidated_file_loads_into_a_stage_3_model(seen: list[dict[str, Any]]) -> None:
    for rank in range(WORLD_SIZE):
        record = seen[rank]["consolidated"]
        assert record["remainder"] == ["counter", "meta", "step"]
        assert record["loaded"] == seen[rank]["stage_3"]["saved"]
    assert seen[0]["consolidated"]["output_exists"].startswith("FileExistsError")


def test_consolidated_file_is_an_ordinary_fp32_checkpoint(seen: list[dict[str, Any]], out_dir: Path) -> None:
    checkpoint = torch.load(out_dir / "stage_3.consolidated", weights_only=True)
    assert sorted(checkpoint) == ["counter", "meta", "model", "step"]
    assert checkpoint["step"] == 2 and checkpoint["counter"] == {"value": 5}
    model = make_model()
    model.load_state_dict(checkpoint["model"])
    assert list(checkpoint["model"]) == PARAMETER_NAMES
    assert all(t.dtype == torch.float32 for t in checkpoint["model"].values())
    assert [p.flatten().tolist() for p in model.parameters()] == seen[0]["stage_3"]["saved"]


if __name__ == "__main__":
    main(sys.argv[1])
