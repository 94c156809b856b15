"""Two processes train with FSDP1 as lit-llama's pretraining script does; each writes OUTDIR/rank<N>.json.

Then the FSDP1 API on the model (full state dict, summon_full_params, no_sync), fabric.save/load in both
formats, and, on a second (FSDP2) strategy in the same processes, the errors for FSDP1 calls.

Usage: python fsdp1_job.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from _common import Block, batches, connected_strategy, half, loss_fn, make_model
from torch.distributed.fsdp import FullStateDictConfig, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from fabric_core import Fabric
from fabric_core.precision.precision import Precision
from fabric_core_fsdp import FSDP1Strategy, FSDPStrategy

STEPS = 4


def full_parameters(model: Any) -> dict[str, list[Any]]:
    """Every parameter whole, by name (collective: gathers with summon_full_params)."""
    with FSDP.summon_full_params(model._forward_module):
        return {name: p.detach().tolist() for name, p in model.module.named_parameters()}


def train(fabric: Fabric, model: Any, optimizer: Any, data: list[Any]) -> list[float]:
    """lit-llama's loop: each rank its half batch, clip, step; the loss averaged over ranks."""
    losses = []
    for x, y in data:
        loss = loss_fn(model(half(x, fabric.global_rank)), half(y, fabric.global_rank))
        fabric.backward(loss)
        fabric.clip_gradients(model, optimizer, max_norm=0.05)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(fabric.all_reduce(loss.detach(), reduce_op="mean")))
    return losses


def lit_llama(fabric: Fabric, out: dict[str, Any], outdir: Path) -> tuple[Any, Any]:
    with fabric.init_module():
        model = make_model()
    model = fabric.setup_module(model)
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=0.01))
    out["forward_module"] = type(model._forward_module).__name__
    out["units"] = len(FSDP.fsdp_modules(model))
    out["local_numel"] = sum(p.numel() for p in model.parameters())
    out["losses"] = train(fabric, model, optimizer, batches(STEPS))
    # lit-llama's save_model_checkpoint, word for word.
    save_policy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, save_policy):
        state_dict = model._forward_module.state_dict()
    out["full_state_dict"] = {k: v.tolist() for k, v in state_dict.items()}
    out["full_state_dict_on_cpu"] = all(v.device.type == "cpu" for v in state_dict.values())
    if fabric.global_rank == 0:
        torch.save(state_dict, outdir / "lit_llama.pt")
    fabric.barrier()
    out["summoned"] = full_parameters(model)
    with FSDP.summon_full_params(model._forward_module):
        out["summoned_shapes"] = [list(p.shape) for p in model.module.parameters()]
    out["shapes_after_summon"] = [list(p.shape) for p in model.module.parameters()]
    return model, optimizer


def grad_shapes(model: Any) -> list[list[int] | None]:
    return [None if p.grad is None else list(p.grad.shape) for p in model.parameters()]


def accumulation(fabric: Fabric, out: dict[str, Any]) -> None:
    """no_sync on the first micro-batch (through Fabric, then FSDP1's own), a synchronised second one."""
    rank = fabric.global_rank
    for name, skip in (
        ("fabric", lambda m: fabric.no_backward_sync(m)),
        ("fsdp", lambda m: m._forward_module.no_sync()),
    ):
        model = fabric.setup_module(make_model())
        optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
        (x, y), (x2, y2) = batches(2, seed=7)
        with skip(model):
            fabric.backward(loss_fn(model(half(x, rank)), half(y, rank)))
        # Inside no_sync FSDP1 keeps each rank's own gradient whole and unreduced; a synchronised backward shards it.
        out[f"{name}_unsynced_grad_shapes"] = [
            None if p.grad is None else list(p.grad.shape) for p in model.parameters()
        ]
        out[f"{name}_unsynced_grad"] = model.module[2].bias.grad.tolist()
        fabric.backward(loss_fn(model(half(x2, rank)), half(y2, rank)))
        out[f"{name}_synced_grad_shapes"] = grad_shapes(model)
        optimizer.step()
        out[f"{name}_accumulated"] = full_parameters(model)


def checkpoints(fabric: Fabric, out: dict[str, Any], outdir: Path, model: Any, optimizer: Any) -> None:
    """fabric.save/load in both formats: a fresh model and optimizer continue exactly as the saved ones."""
    after = batches(2, seed=11)
    for kind in ("sharded", "full"):
        fabric.strategy._state_dict_type = kind
        path = outdir / f"ckpt-{kind}"
        fabric.save(path, {"model": model, "optimizer": optimizer, "step": 4})
        out[f"{kind}_is_dir"] = path.is_dir()
        fresh = fabric.setup_module(make_model(seed=5))
        fresh_optimizer = fabric.setup_optimizers(torch.optim.AdamW(fresh.parameters(), lr=0.01))
        state: dict[str, Any] = {"model": fresh, "optimizer": fresh_optimizer, "step": 0}
        remainder = fabric.load(path, state)
        out[f"{kind}_step"] = state["step"]
        out[f"{kind}_remainder"] = sorted(remainder)
        out[f"{kind}_loaded_equal"] = full_parameters(fresh) == full_parameters(model)
        out[f"{kind}_continued"] = train(fabric, fresh, fresh_optimizer, after)
    out["saved_continued"] = train(fabric, model, optimizer, after)


def fsdp2_refusals(fabric: Fabric, out: dict[str, Any], fsdp1_model: Any) -> None:
    """FSDP1 calls on a module sharded with FSDP2 fail with what to do; on FSDP1 modules they still work."""
    strategy = connected_strategy(fabric, Precision(), auto_wrap_policy={Block})
    assert type(strategy) is FSDPStrategy
    sharded = strategy.setup_module(make_model())
    calls = {
        "state_dict_type": lambda: FSDP.state_dict_type(sharded, StateDictType.FULL_STATE_DICT),
        "summon_full_params": lambda: FSDP.summon_full_params(sharded),
        "no_sync": lambda: sharded.no_sync(),
    }
    for name, call in calls.items():
        try:
            with call():
                pass
            out[f"fsdp2_{name}"] = None
        except Exception as err:
            out[f"fsdp2_{name}"] = [type(err).__name__, str(err)]
    with FSDP.state_dict_type(fsdp1_model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=False)):
        out["fsdp1_after_guard"] = len(fsdp1_model._forward_module.state_dict())


def main(outdir: Path) -> None:
    strategy = FSDP1Strategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block}, limit_all_gathers=True)
    fabric = Fabric(accelerator="cpu", devices=2, strategy=strategy)
    fabric.launch()
    fabric.seed_everything(0)
    out: dict[str, Any] = {"rank": fabric.global_rank, "world_size": fabric.world_size}
    out["is_fsdp_strategy"] = isinstance(fabric.strategy, FSDPStrategy)
    model, optimizer = lit_llama(fabric, out, outdir)
    out["checkpoint_wrapped"] = sum(type(m).__name__ == "CheckpointWrapper" for m in model.modules())
    accumulation(fabric, out)
    checkpoints(fabric, out, outdir, model, optimizer)
    fsdp2_refusals(fabric, out, model)
    (outdir / f"rank{fabric.global_rank}.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
