"""The 2-process half of the differential suite: ``python compat_job.py PACKAGE OUT_DIR`` (gloo, 127.0.0.1).

``fabric.launch()`` starts the second rank the way each package does for a script; every rank runs each part
below and writes ``OUT_DIR/rank{N}.json``: ``{part: {"value": ...} | {"error": [builtin, type, message]}}``.
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset


def _ranks(fabric: Any, lib: Any) -> Any:
    return [fabric.global_rank, fabric.local_rank, fabric.node_rank, fabric.world_size, fabric.is_global_zero]


def _all_gather(fabric: Any, lib: Any) -> Any:
    out = fabric.all_gather(torch.tensor([fabric.global_rank + 1.0, 10.0]))
    return [list(out.shape), out.tolist()]


def _all_gather_int(fabric: Any, lib: Any) -> Any:
    out = fabric.all_gather(3)
    return [str(out.dtype), out.tolist()]


def _all_gather_dict(fabric: Any, lib: Any) -> Any:
    out = fabric.all_gather({"a": torch.tensor(float(fabric.global_rank))})
    return {key: value.tolist() for key, value in out.items()}


def _all_reduce(fabric: Any, lib: Any) -> Any:
    value = torch.tensor(fabric.global_rank + 1.0)
    return [float(fabric.all_reduce(value, reduce_op="sum")), float(fabric.all_reduce(value)), float(value)]


def _broadcast(fabric: Any, lib: Any) -> Any:
    fabric.barrier()
    return [fabric.broadcast({"from": fabric.global_rank}), fabric.broadcast(fabric.global_rank * 10, src=1)]


def _train_no_backward_sync(fabric: Any, lib: Any) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    generator = torch.Generator().manual_seed(100 + fabric.global_rank)  # different data on each rank
    for step in range(4):
        x = torch.randn(4, 4, generator=generator)
        accumulating = step % 2 == 0
        with fabric.no_backward_sync(model, enabled=accumulating):
            fabric.backward(model(x).pow(2).mean())
        if not accumulating:
            optimizer.step()
            optimizer.zero_grad()
    return [round(float(p.detach().sum()), 5) for p in model.parameters()]


def _dataloader(fabric: Any, lib: Any) -> Any:
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.arange(10.0)), batch_size=2))
    return {"len": len(loader), "batches": [batch[0].tolist() for batch in loader]}


def _batch_sampler(fabric: Any, lib: Any) -> Any:
    dataset = TensorDataset(torch.arange(8.0))
    sampler = BatchSampler(SequentialSampler(dataset), batch_size=2, drop_last=False)
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_sampler=sampler))
    return [batch[0].tolist() for batch in loader]


def _save_load(fabric: Any, lib: Any) -> Any:
    path = Path(sys.argv[2]) / "shared.ckpt"
    fabric.save(path, {"step": 5, "rank0": fabric.global_rank})
    fabric.barrier()
    state = {"step": 0}
    remainder = fabric.load(path, state)
    return [state["step"], remainder]


def _all_reduce_dict(fabric: Any, lib: Any) -> Any:
    out = fabric.all_reduce({"a": torch.tensor(float(fabric.global_rank)), "b": torch.tensor(2.0)}, reduce_op="sum")
    return {key: float(value) for key, value in sorted(out.items())}


def _broadcast_tensor(fabric: Any, lib: Any) -> Any:
    out = fabric.broadcast(torch.full((2,), float(fabric.global_rank + 5)), src=1)
    return out.tolist()


def _rank_zero_first(fabric: Any, lib: Any) -> Any:
    path = Path(sys.argv[2]) / "order.txt"
    with fabric.rank_zero_first():
        with path.open("a") as file:
            file.write(str(fabric.global_rank))
    fabric.barrier("after-rank-zero-first")
    return path.read_text()


PARTS: dict[str, Callable[[Any, Any], Any]] = {
    "ranks": _ranks,
    "all_gather": _all_gather,
    "all_gather_int": _all_gather_int,
    "all_gather_dict": _all_gather_dict,
    "all_reduce": _all_reduce,
    "broadcast": _broadcast,
    "no_backward_sync_training": _train_no_backward_sync,
    "setup_dataloaders": _dataloader,
    "custom_batch_sampler": _batch_sampler,
    "save_load_shared_path": _save_load,
    "all_reduce_dict": _all_reduce_dict,
    "broadcast_tensor": _broadcast_tensor,
    "rank_zero_first": _rank_zero_first,
}


def main() -> None:
    lib = importlib.import_module(sys.argv[1])
    out = Path(sys.argv[2])
    fabric = lib.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    results: dict[str, Any] = {}
    for name, part in PARTS.items():
        try:
            results[name] = {"value": part(fabric, lib)}
        except Exception as exc:
            builtin = next(c for c in type(exc).__mro__ if c.__module__ == "builtins").__name__
            results[name] = {"error": [builtin, type(exc).__name__, str(exc)[:500]]}
        fabric.barrier()  # a part that failed on one rank only must not leave the other in a collective
    (out / f"rank{fabric.global_rank}.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    if lib.__name__ == "lightning_fabric":
        # Lightning's ranks exit with the gloo group open, which torch 2.13 aborts about once in fifteen runs
        # ("terminate called without an active exception"); fabric-core's collect, meet and destroy it at
        # teardown. This comparison is about the parts' results, so Lightning's side does the same
        # (`tests.lightning_side_by_side.close_lightning_group`, which this script, run alone, cannot import).
        gc.collect()
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
